package broker

import (
	"log/slog"

	"github.com/walbroker/walbroker/internal/logguard"
)

// guardLogger returns the logger the broker writes to for l (Options.Logger,
// MemoryOptions.Logger, ConsumeOptions.Logger): one that recovers a panic
// of its handler and reports the record it lost to the standard log
// package, by its level and message with the type of the panic's value,
// its attributes (a cause's text among them) and the value withheld; and that discards for a nil l
// (see logguard.Wrap).
//
// The handler is the caller's code, and the broker logs on goroutines of
// its own (the log's goroutines that log for its writer and preparer,
// maintenance, the goroutine that reports a failed store, Consume's
// workers), where a panic would end the
// process, and after changes it has already made durable, where a panic
// would report a failure for a call that succeeded, or leave an Open
// half done with its directory locked. See docs/DESIGN.md, "Concurrency".
func guardLogger(l *slog.Logger) *slog.Logger { return logguard.Wrap(l) }
