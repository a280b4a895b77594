//go:build !linux

package wal

import "time"

// Only Linux has timerfds: elsewhere the runtime timer alone is the alarm.
func newTimerfd() (fd int, ok bool) { return -1, false }

func setTimerfd(int, time.Duration) {}
