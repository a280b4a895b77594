package vfs

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
)

// EvictFailedWrites drops from the page cache the pages that a failed
// fdatasync left there, as Linux may at any moment after a writeback
// error: it marks the failed pages clean, and a clean page may be
// evicted, after which a read shows what the device holds. From then on,
// in every file of the CrashFS whose fdatasync failed, each page not
// written again since the failure reads as its durable content (zeros
// past the durable end, as a block the device never got reads); a page
// written since is dirty, not evictable, and keeps what the page cache
// holds. Sizes are kept, as the inode holds them.
//
// Without it the CrashFS keeps a failed fdatasync's writes readable for
// the rest of the boot, which a real kernel promises no more than it
// promises to evict them. It changes nothing a crash leaves (the durable
// content, and the record of each write since the failure), is no
// mutating operation, and works after a crash too (the machine is still
// up). A removed file is left as it is: nothing reads it again. Safe for
// concurrent use.
func (c *CrashFS) EvictFailedWrites() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[*crashNode]bool{}
	for _, dir := range slices.Sorted(maps.Keys(c.dirs)) {
		d := c.dirs[dir]
		for _, base := range slices.Sorted(maps.Keys(d.cur)) {
			n := d.cur[base]
			if n == nil || seen[n] || !n.hasBase || n.contents != nil || n.path == "" {
				continue
			}
			seen[n] = true
			if err := c.evictLocked(n); err != nil {
				return err
			}
		}
	}
	return nil
}

// evictLocked writes into the inner file of n, which has a base, the
// device's bytes in every page no write since the failure dirtied.
func (c *CrashFS) evictLocked(n *crashNode) error {
	if n.unknown != nil {
		return fmt.Errorf("vfs: CrashFS: evict %s: %w", n.path, n.unknown)
	}
	cur, err := readWhole(c.inner, n.path)
	if err != nil {
		return err
	}
	dirty := map[int64]bool{} // by page index
	for _, p := range dirtyPages(n) {
		dirty[p] = true
	}
	evicted := bytes.Clone(cur)
	for p := int64(0); p*crashBlockSize < int64(len(cur)); p++ {
		if dirty[p] {
			continue
		}
		from, to := p*crashBlockSize, min((p+1)*crashBlockSize, int64(len(cur)))
		clear(evicted[from:to])
		if from < int64(len(n.base)) {
			copy(evicted[from:to], n.base[from:min(to, int64(len(n.base)))])
		}
	}
	if bytes.Equal(evicted, cur) {
		return nil
	}
	f, err := c.inner.OpenFile(n.path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(evicted, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// dirtyPages returns, in order, the indexes of the pages of n that its
// unsynced log changed: those a write touched, and those a truncation cut
// off or zeroed.
func dirtyPages(n *crashNode) []int64 {
	dirty := map[int64]bool{}
	for i := range n.log {
		r := &n.log[i]
		from, to := r.off, r.off+int64(len(r.data))
		if r.truncate {
			from, to = min(r.off, r.prevSize), max(r.off, r.prevSize) // what it zeroed or cut
		}
		for p := from / crashBlockSize; p*crashBlockSize < to; p++ {
			dirty[p] = true
		}
	}
	return slices.Sorted(maps.Keys(dirty))
}
