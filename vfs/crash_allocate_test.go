package vfs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAllocateKeepsBytesAnotherHandleWritesMeanwhile: Allocator promises
// "bytes already written there are kept", and a File is safe for
// concurrent use. The CrashFS's Allocate reads the size and writes zeros
// past it: a write through another handle must land before the size is
// read or after the zeros, never in between.
//
// The write is made when the inner FS reports the size to Allocate: at
// once if the CrashFS's mutex is free then (the write falls in between,
// deterministically), else from another goroutine, which waits for
// Allocate to finish.
func TestAllocateKeepsBytesAnotherHandleWritesMeanwhile(t *testing.T) {
	dir := t.TempDir()
	ffs := NewFaultFS(Default)
	c := NewCrashFS(ffs)
	name := filepath.Join(dir, "seg")
	f := openRW(t, c, name)
	defer f.Close()
	g, err := c.OpenFile(name, os.O_RDWR, 0)
	require.NoError(t, err)
	defer g.Close()
	write := func() {
		if _, err := g.WriteAt([]byte("kept"), 0); err != nil {
			t.Error(err)
		}
	}
	armed := false
	wrote := make(chan struct{})
	ffs.Observe(func(e Event) {
		if e.Op != OpSize || !armed {
			return
		}
		armed = false
		if c.mu.TryLock() {
			c.mu.Unlock()
			write()
			close(wrote)
			return
		}
		go func() {
			defer close(wrote)
			write()
		}()
	})
	armed = true
	require.NoError(t, f.(Allocator).Allocate(0, 16))
	<-wrote
	got := make([]byte, 16)
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, "kept", string(got[:4]), "Allocate wrote zeros over bytes written before it allocated them")
}
