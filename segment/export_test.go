package segment

// ScanWork is ScanFrom, also returning how many bytes the scan
// checksummed, for tests that bound a scan's work by counting it rather
// than timing it.
func ScanWork(data []byte, seq uint32, from int, salvage bool, fn func(Frame) error) (Report, int, error) {
	sc := scanFrom(data, seq, from, salvage, fn)
	return sc.Report, sc.work.summed, sc.err
}
