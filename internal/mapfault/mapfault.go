// Package mapfault turns a fault reading a file's memory mapping into an
// error. A page of a mapping that the file no longer backs (the file was
// cut short after it was mapped: by another process, by hand) raises
// SIGBUS when touched, and the Go runtime ends the process for it, with
// no deferred call run and nothing to recover, unless the goroutine asked
// for a panic instead (runtime/debug.SetPanicOnFault). Read asks for one
// around a read of the mapping, recovers a fault inside the mapping, and
// returns it as an error; any other panic goes on.
package mapfault

import (
	"errors"
	"fmt"
	"runtime/debug"
	"unsafe"
)

// ErrFault is returned, wrapped, by Read when reading the mapping faulted.
// Check with errors.Is.
var ErrFault = errors.New("a page of the mapping is not backed by the file (was it cut short?)")

// Fault is the error of a read of a mapping that faulted. It wraps
// ErrFault.
type Fault struct {
	Offset int // in the mapping, of the byte whose read faulted
	Len    int // of the mapping
}

func (f *Fault) Error() string {
	return fmt.Sprintf("mmap: reading offset %d of %d bytes mapped: %v", f.Offset, f.Len, ErrFault)
}

// Unwrap returns ErrFault.
func (f *Fault) Unwrap() error { return ErrFault }

// Read calls read, which reads m, a memory mapping, and returns its error;
// if reading m faults, it returns a *Fault giving the offset in m of the
// byte whose read faulted. read must not keep a slice of m
// past its return, nor be relied on to have finished: a fault stops it
// where it is. A fault outside m, or any other panic, is not recovered.
func Read(m []byte, read func() error) (err error) {
	defer Catch(Guard(), &err, m)
	return read()
}

// Guard asks for a panic, not the end of the process, at a fault of the
// calling goroutine, and returns what Catch is to restore. A reader that
// cannot take a closure (one whose captured results would cost an
// allocation per call) calls it, then defers Catch at once:
//
//	defer mapfault.Catch(mapfault.Guard(), &err, m)
func Guard() bool { return debug.SetPanicOnFault(true) }

// Catch, deferred right after Guard, gives the goroutine back the setting
// Guard found (old) and, if the function it was deferred by faulted
// reading one of maps, sets *err to a *Fault giving the offset in that
// mapping of the byte whose read faulted. A fault outside
// maps, or any other panic, is not recovered.
func Catch(old bool, err *error, maps ...[]byte) {
	debug.SetPanicOnFault(old)
	r := recover()
	if r == nil {
		return
	}
	for _, m := range maps {
		if off, ok := faultIn(m, r); ok {
			*err = &Fault{Offset: off, Len: len(m)}
			return
		}
	}
	panic(r)
}

// faultIn returns the offset in m of the fault r reports, and false when r
// is no fault or one outside m.
func faultIn(m []byte, r any) (int, bool) {
	f, ok := r.(interface{ Addr() uintptr })
	if !ok || len(m) == 0 {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(m)))
	addr := f.Addr()
	if addr < base || addr-base >= uintptr(len(m)) {
		return 0, false
	}
	return int(addr - base), true
}
