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
// to wait for the first (no longer than ctx's deadline leaves). It is
// JetStream's pull protocol done by hand, because the client library's
// fetches either never wait (and so miss a message published a moment ago)
// or wait for the whole batch.
//
// Every message the server sent in answer is delivered and counted by it:
// one that pull dropped would be leased to nobody until its lease lapsed,
// and spend one of its deliveries. So when ctx ends during the batch, pull
// still reads what the server sent (see nextMsg) and returns it with a
// nil error; it returns ctx's error only when nothing came, and sends no
// request once ctx ended.
func (q *Queue) pull(ctx context.Context, batch int, wait time.Duration) ([]delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // a request now would be answered to nobody
	}
	nc := q.s.nc
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	body, err := json.Marshal(pullRequest{Batch: batch, Expires: waitWithin(ctx, wait), NoWait: true})
	if err != nil {
		return nil, err
	}
	if err := nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+q.n.work+"."+consumerName, inbox, body); err != nil {
		return nil, err
	}
	var out []delivery
	var late error // ctx's end, met during the batch: what came is leased
	for len(out) < batch {
		m, err := nextMsg(ctx, sub, late != nil)
		if err != nil {
			switch {
			case late != nil && len(out) == 0:
				return nil, late
			case late != nil:
				return out, nil // no more in time
			case ctx.Err() == nil || errors.Is(err, nats.ErrConnectionClosed):
				return out, err
			}
			// The batch did not end in time. The client checks ctx
			// before the messages it holds: read those, and those still
			// arriving, through nextMsg's tail.
			late = err
			continue
		}
		d, end, err := readDelivery(m)
		if err != nil || end {
			if late != nil && len(out) == 0 {
				return nil, late
			}
			return out, err
		}
		if d.msg != nil {
			out = append(out, d)
		}
	}
	return out, nil
}

// waitWithin is wait, cut to what ctx's deadline leaves: the server keeps
// a pull open no longer than the caller waits for its answer.
func waitWithin(ctx context.Context, wait time.Duration) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return wait
	}
	return max(0, min(wait, time.Until(deadline)))
}

// nextMsg returns the next message of a pull's answer: within ctx, or,
// once ctx ended (late), within tailWait of the one before, so that what
// the server already sent is read. The server waits no longer than the
// deadline for a first message (waitWithin) and sends the batch at once,
// so a pull outlasts its deadline by a few milliseconds at most; a message
// that takes longer to arrive is dropped and its lease lapses.
func nextMsg(ctx context.Context, sub *nats.Subscription, late bool) (*nats.Msg, error) {
	if late {
		return sub.NextMsg(tailWait)
	}
	return sub.NextMsgWithContext(ctx)
}

// readDelivery reads one message of the server's answer to a pull: a
// delivery, or (d.msg nil) a heartbeat to skip, or end when the server says
// it has no more messages for the pull.
func readDelivery(m *nats.Msg) (d delivery, end bool, err error) {
	if status := m.Header.Get("Status"); status != "" {
		switch status {
		case "100": // idle heartbeat
			return delivery{}, false, nil
		case "404", "408": // no (more) messages; requests pending
			return delivery{}, true, nil
		default:
			return delivery{}, false, fmt.Errorf("pull: the server answered %s %s", status, m.Header.Get("Description"))
		}
	}
	d, err = parseDelivery(m)
	return d, false, err
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
