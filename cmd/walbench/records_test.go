package main

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/walbroker/walbroker/broker"
)

// TestCallerRecordsOfAWindowReadApartIsNeverNegative: Stats reads Records
// and OwnRecords apart, so a window that appended nothing can see an own
// record in OwnRecords that Records does not count yet. Its callers
// appended no record, not minus one (a negative count in -json, which
// report refuses); a window that appended some counts them.
func TestCallerRecordsOfAWindowReadApartIsNeverNegative(t *testing.T) {
	before := broker.StoreStats{Records: 10, OwnRecords: 3}
	apart := broker.StoreStats{Records: 10, OwnRecords: 4} // a reservation queued, not yet written
	require.Equal(t, int64(0), callerRecords(before, apart))
	grew := broker.StoreStats{Records: 110, OwnRecords: 4}
	require.Equal(t, int64(99), callerRecords(before, grew))
}
