package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// readyWait is how long a pull waits for its first message when one is
// known to have been published (see Queue.ready): the server answers the
// publish before it tells the stream's consumer about the message, so a
// pull that does not wait at all may find nothing right after a publish
// returned. A pull that knows of nothing does not wait.
//
// tailWait is how long the pull after a pull that found some messages
// waits for more: it ends the batch when the first pull stopped short for
// the same reason.
const (
	readyWait = 200 * time.Millisecond
	tailWait  = 10 * time.Millisecond
)

// delivery is one message the server handed out to a pull, with what its
// ack subject says about it.
type delivery struct {
	msg       *nats.Msg
	seq       uint64    // in the work stream
	delivered int       // the server's count, this delivery included
	stored    time.Time // when the server stored the message
	pending   uint64    // the messages the consumer had left to deliver for the first time, after this one
}

// pullRequest is the body of a JetStream pull request: up to Batch
// messages, never waiting for more once one came (NoWait), and waiting up
// to Expires for the first one.
type pullRequest struct {
	Batch   int           `json:"batch"`
	Expires time.Duration `json:"expires,omitempty"`
	NoWait  bool          `json:"no_wait"`
}

// pull asks the work stream's consumer for up to batch messages, waiting up
// to wait for the first. It is JetStream's pull protocol done by hand,
// because the client library's fetches either never wait (and so miss a
// message published a moment ago) or wait for the whole batch.
func (q *Queue) pull(ctx context.Context, batch int, wait time.Duration) ([]delivery, error) {
	nc := q.s.nc
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	body, err := json.Marshal(pullRequest{Batch: batch, Expires: wait, NoWait: true})
	if err != nil {
		return nil, err
	}
	if err := nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+q.n.work+"."+consumerName, inbox, body); err != nil {
		return nil, err
	}
	var out []delivery
	for len(out) < batch {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			if len(out) > 0 && !errors.Is(err, nats.ErrConnectionClosed) {
				// The end of the batch did not come in time; what came
				// is leased.
				return out, nil
			}
			return out, err
		}
		if status := m.Header.Get("Status"); status != "" {
			switch status {
			case "100": // idle heartbeat
				continue
			case "404", "408": // no (more) messages; requests pending
				return out, nil
			default:
				return out, fmt.Errorf("pull: the server answered %s %s", status, m.Header.Get("Description"))
			}
		}
		d, err := parseDelivery(m)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

// parseDelivery reads the metadata of a delivery from its ack subject:
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ns>.<pending>, or
// the newer form with <domain>.<account hash> before the stream and a
// token after the pending count.
func parseDelivery(m *nats.Msg) (delivery, error) {
	rest, ok := strings.CutPrefix(m.Reply, "$JS.ACK.")
	if !ok {
		return delivery{}, fmt.Errorf("delivery with reply subject %q: not a JetStream ack subject", m.Reply)
	}
	tokens := strings.Split(rest, ".")
	switch {
	case len(tokens) == 7:
	case len(tokens) >= 9:
		tokens = tokens[2:]
	default:
		return delivery{}, fmt.Errorf("delivery with ack subject %q: %d tokens", m.Reply, len(tokens)+2)
	}
	delivered, err1 := strconv.ParseUint(tokens[2], 10, 31)
	seq, err2 := strconv.ParseUint(tokens[3], 10, 64)
	stored, err3 := strconv.ParseInt(tokens[5], 10, 64)
	pending, err4 := strconv.ParseUint(tokens[6], 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil || delivered == 0 || seq == 0 {
		return delivery{}, fmt.Errorf("delivery with ack subject %q: bad metadata: %v", m.Reply, err)
	}
	return delivery{msg: m, seq: seq, delivered: int(delivered), stored: time.Unix(0, stored), pending: pending}, nil
}
