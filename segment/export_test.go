package segment

// ScanWork is ScanFrom, also returning how many bytes the scan
// checksummed, for tests that bound a scan's work by counting it rather
// than timing it.
func ScanWork(data []byte, seq uint32, from int, salvage bool, fn func(Frame) error) (Report, int, error) {
	sc := scanFrom(data, seq, from, salvage, fn)
	return sc.Report, sc.work.summed, sc.err
}

// ScanAllowance returns the allowance of a scan of a file of n bytes (in
// bytes over which checksums may fail), whether such a scan, having spent
// none of it, affords a checksum over k bytes, and RecoverSalt's budget
// for such a file: for sizes no test can allocate.
func ScanAllowance(n, k int) (allowance int, affords bool, saltWork int) {
	w := work{allowance: perByte(resyncAllowance, n)}
	return w.allowance, w.spares(k), perByte(saltBudget, n)
}
