package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// crashBlockSize is the granularity at which CrashClone keeps or drops
// unsynced writes unless CrashOptions.BlockSize says otherwise: a page,
// the unit in which the kernel writes back.
const crashBlockSize = 4096

// CrashOptions says how [CrashFS.CrashClone] treats data that was written
// but not yet covered by a successful Sync.
type CrashOptions struct {
	// Root is the directory whose tree is cloned. If empty, it is the one
	// directory named in calls to the CrashFS (the directory of a file, or
	// a directory given to MkdirAll, ReadDir or SyncDir, or the parent of
	// one MkdirAll made) that contains all the others so named; CrashClone
	// fails if there is none, or if it is the file system's root (after
	// MkdirAllDurable of an absolute path, which syncs every directory up
	// to it, name the Root). Root itself must exist, and is cloned as
	// the directory now at that path: whether a crash would keep its own
	// name is a question for a clone of its parent.
	Root string

	// KeepUnsyncedFraction is the probability, between 0 (the default:
	// drop every unsynced byte) and 1 (keep them all), with which each
	// unsynced write survives, decided independently for each block of
	// BlockSize bytes (aligned in the file) that the write touches, and
	// likewise for each unsynced Truncate (unless KeepUnsyncedSizes
	// decides those). Writes are replayed in order over the durable
	// content, so what survives may come back reordered and with holes: a
	// dropped block keeps what the file held there before the write,
	// which reads as zeros where the write had extended the file. Unless
	// KeepUnsyncedSizes says otherwise, a file's size is its durable size,
	// grown by the surviving blocks and changed by the surviving
	// truncations. Unless KeepUnsyncedNames says otherwise, strictly
	// between 0 and 1 it also keeps a prefix, of a length drawn uniformly,
	// of the changes of names (creations, renames, removals) no SyncDir
	// has made durable, in the order they were made, each rename whole;
	// at 0 and at 1 it keeps none of them.
	KeepUnsyncedFraction float64

	// KeepUnsyncedNames says which of the changes of names no SyncDir has
	// made durable survive, whatever KeepUnsyncedFraction keeps of the
	// data: [KeepNone], [KeepPrefix] (of a length drawn uniformly, in the
	// order they were made, each rename whole, as a journalling file
	// system that commits them in order may leave them), [KeepSubset]
	// (each change, a rename whole, kept or lost on its own with even
	// odds, whatever became of those before it, as a file system with
	// logs of its own per file or directory, btrfs's fsync log, may leave
	// them; where several kept changes name one entry, the last made
	// holds) or [KeepAll]. The
	// default, "", is KeepPrefix strictly between 0 and 1 and KeepNone at
	// 0 and at 1. KeepAll with KeepUnsyncedFraction 1 is a power loss
	// after every dirty page and every journalled change of names reached
	// the device, before any directory sync: the tree as the page cache
	// holds it, as a process crash leaves it.
	KeepUnsyncedNames KeepUnsynced

	// KeepUnsyncedSizes says which unsynced changes of each file's size
	// survive apart from the data that made them. With [KeepNone] (the
	// default, "") none does: a file's size follows the surviving blocks
	// and truncations (see KeepUnsyncedFraction). Otherwise a file's
	// unsynced size changes (the writes that extended it and the
	// truncations, in the order they were made) are metadata, committed
	// in order apart from the data, as on ext4 with data=writeback, xfs
	// and others: [KeepPrefix] keeps a prefix of them, of a length drawn
	// uniformly for each file, and [KeepAll] keeps them all. The file
	// then ends where the last size change kept left it, whatever blocks
	// survive: a range that the kept sizes cover and no surviving block
	// does reads as it did before the writes (zeros where they had
	// extended the file), and surviving blocks past the end are lost. A
	// truncation survives exactly when it is in the kept prefix (its
	// survival is not drawn with KeepUnsyncedFraction).
	KeepUnsyncedSizes KeepUnsynced

	// TearLastWrite cuts the last unsynced write of each file after a
	// random number of bytes (possibly none, never all) before the
	// surviving blocks are chosen, as a write torn by the power loss.
	TearLastWrite bool

	// BlockSize is the unit, in bytes, in which unsynced writes survive
	// or are lost: 0 (the default) is a 4 KiB page, the unit in which the
	// kernel writes back; 512 models a device that, losing power in the
	// middle of a page's writeback, keeps some of its sectors and not
	// others.
	BlockSize int

	// Rand is the seeded source of those choices. It is required when
	// KeepUnsyncedFraction is strictly between 0 and 1, or positive with
	// TearLastWrite, or when KeepUnsyncedNames or KeepUnsyncedSizes is
	// KeepPrefix; files are visited in name order, so a fixed seed over a
	// fixed workload gives a fixed clone. KeepUnsyncedNames and
	// KeepUnsyncedSizes left at "" draw from it only what was drawn before
	// they existed (the length of the prefix of names kept strictly
	// between 0 and 1), so that a seed gives the clone it gave then.
	Rand *rand.Rand
}

// KeepUnsynced says which of a kind of unsynced change a crash keeps (see
// [CrashOptions.KeepUnsyncedNames] and [CrashOptions.KeepUnsyncedSizes]).
type KeepUnsynced string

// The values of KeepUnsynced; "" is each field's default.
const (
	KeepNone   KeepUnsynced = "none"   // none of them
	KeepPrefix KeepUnsynced = "prefix" // the first of them, as many as drawn from Rand
	KeepAll    KeepUnsynced = "all"    // all of them
	// KeepSubset keeps each of them, or not, drawn from Rand on its own:
	// any subset, in no order. Only KeepUnsyncedNames takes it.
	KeepSubset KeepUnsynced = "subset"
)

// check returns an error if k is not one of the values of KeepUnsynced,
// or "", or is KeepSubset where subset is false.
func (k KeepUnsynced) check(field string, subset bool) error {
	switch k {
	case "", KeepNone, KeepPrefix, KeepAll:
		return nil
	case KeepSubset:
		if subset {
			return nil
		}
		return fmt.Errorf("vfs: CrashClone: %s %q: a subset of a file's size changes, out of their order, is no state a file system leaves", field, string(k))
	}
	if subset {
		return fmt.Errorf("vfs: CrashClone: %s %q is none of %q, %q, %q, %q", field, string(k), KeepNone, KeepPrefix, KeepSubset, KeepAll)
	}
	return fmt.Errorf("vfs: CrashClone: %s %q is none of %q, %q, %q", field, string(k), KeepNone, KeepPrefix, KeepAll)
}

// keep decides whether one unsynced block or truncation survives.
func (o *CrashOptions) keep() bool {
	switch {
	case o.KeepUnsyncedFraction <= 0:
		return false
	case o.KeepUnsyncedFraction >= 1:
		return true
	}
	return o.Rand.Float64() < o.KeepUnsyncedFraction
}

// CrashClone writes into the directory dst, which it creates (0700) and
// which must be empty and outside the cloned tree, the files of the tree as
// a power loss right now would leave them (see [CrashOptions]): every
// durable name, with its durable content plus the unsynced writes that opts
// lets survive. Files are created 0600, directories 0700. It changes
// nothing in the CrashFS, so it may be called again with other options,
// and it works whether or not the CrashFS has crashed. Safe for concurrent
// use: mutating operations wait while it runs.
func (c *CrashFS) CrashClone(dst string, opts CrashOptions) error {
	f := opts.KeepUnsyncedFraction
	if !(f >= 0 && f <= 1) { // NaN too
		return fmt.Errorf("vfs: CrashClone: KeepUnsyncedFraction %v outside [0, 1]", f)
	}
	if opts.BlockSize < 0 {
		return fmt.Errorf("vfs: CrashClone: BlockSize %d is negative", opts.BlockSize)
	}
	if err := opts.KeepUnsyncedNames.check("KeepUnsyncedNames", true); err != nil {
		return err
	}
	if err := opts.KeepUnsyncedSizes.check("KeepUnsyncedSizes", false); err != nil {
		return err
	}
	if opts.Rand == nil && (f > 0 && f < 1 || f > 0 && opts.TearLastWrite ||
		opts.KeepUnsyncedNames == KeepPrefix || opts.KeepUnsyncedNames == KeepSubset || opts.KeepUnsyncedSizes == KeepPrefix) {
		return errors.New("vfs: CrashClone: these options need a Rand")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	root := filepath.Clean(opts.Root)
	if opts.Root == "" {
		var err error
		if root, err = c.rootLocked(); err != nil {
			return err
		}
	}
	dst = filepath.Clean(dst)
	// Compared resolved: a relative dst, or one reached through a
	// symbolic link, can lie inside a root spelt otherwise.
	rroot, err := Resolve(root)
	if err != nil {
		return fmt.Errorf("vfs: CrashClone: %w", err)
	}
	rdst, err := Resolve(dst)
	if err != nil {
		return fmt.Errorf("vfs: CrashClone: %w", err)
	}
	if within(rroot, rdst) {
		return fmt.Errorf("vfs: CrashClone: destination %s is inside the cloned tree %s", dst, root)
	}
	if err := c.inner.MkdirAll(dst, 0o700); err != nil {
		return fmt.Errorf("vfs: CrashClone: %w", err)
	}
	names, err := c.inner.ReadDir(dst)
	if err != nil {
		return fmt.Errorf("vfs: CrashClone: %w", err)
	}
	if len(names) > 0 {
		return fmt.Errorf("vfs: CrashClone: destination %s is not empty", dst)
	}

	// The durable names, and the unsynced changes of names that the crash
	// keeps: a prefix of them, or a subset, whole renames.
	groups := 0
	for i, op := range c.names {
		if i == 0 || op.group != c.names[i-1].group {
			groups++
		}
	}
	keepNames := opts.KeepUnsyncedNames
	if keepNames == "" {
		keepNames = KeepNone
		if f > 0 && f < 1 {
			keepNames = KeepPrefix
		}
	}
	// keepGroup[g-1] says whether the crash keeps group g (counted from 1).
	keepGroup := make([]bool, groups)
	switch keepNames {
	case KeepAll:
		for g := range keepGroup {
			keepGroup[g] = true
		}
	case KeepPrefix:
		if groups > 0 {
			for g := range opts.Rand.IntN(groups + 1) {
				keepGroup[g] = true
			}
		}
	case KeepSubset:
		for g := range keepGroup {
			keepGroup[g] = opts.Rand.IntN(2) == 1
		}
	}
	kept := make(map[*crashDir]map[string]*crashNode)
	for i, g := 0, 0; i < len(c.names); i++ {
		op := c.names[i]
		if i == 0 || op.group != c.names[i-1].group {
			g++
		}
		if !keepGroup[g-1] {
			continue
		}
		if kept[op.dir] == nil {
			kept[op.dir] = make(map[string]*crashNode)
		}
		kept[op.dir][op.base] = op.node
	}
	// What each relative name of the clone holds: a tracked node, or the
	// untracked file of that path on disk.
	t := crashTree{
		kept:      kept,
		dirs:      make(map[string]bool),
		nodes:     make(map[string]*crashNode),
		untracked: make(map[string]string),
	}
	if err := c.durableTreeLocked(&t, ".", root, c.dirs[root]); err != nil {
		return err
	}
	dirSet, nodes, untracked := t.dirs, t.nodes, t.untracked

	dirs := sortedKeys(dirSet)
	for _, rel := range dirs {
		if err := c.inner.MkdirAll(filepath.Join(dst, rel), 0o700); err != nil {
			return fmt.Errorf("vfs: CrashClone: %w", err)
		}
	}
	images := make(map[*crashNode][]byte) // a node may have two durable names
	for _, rel := range sortedKeys(nodes) {
		n := nodes[rel]
		img, ok := images[n]
		if !ok {
			var err error
			if img, err = c.imageLocked(n, &opts); err != nil {
				return err
			}
			images[n] = img
		}
		if err := writeWhole(c.inner, filepath.Join(dst, rel), img); err != nil {
			return err
		}
	}
	for _, rel := range sortedKeys(untracked) {
		data, err := readWhole(c.inner, untracked[rel])
		if err != nil {
			return err
		}
		if err := writeWhole(c.inner, filepath.Join(dst, rel), data); err != nil {
			return err
		}
	}
	return nil
}

// rootLocked finds the directory used that contains all the others.
func (c *CrashFS) rootLocked() (string, error) {
	dirs := sortedKeys(c.used)
	for _, root := range dirs {
		all := true
		for _, dir := range dirs {
			all = all && within(root, dir)
		}
		if all && filepath.Dir(root) == root && filepath.IsAbs(root) {
			// MkdirAllDurable of an absolute path syncs every directory
			// up to the file system's root: a clone of that is never
			// what a test means.
			return "", fmt.Errorf("vfs: CrashClone: no CrashOptions.Root, and the directories named contain %s: name the Root", root)
		}
		if all {
			return root, nil
		}
	}
	return "", fmt.Errorf("vfs: CrashClone: no CrashOptions.Root, and none of the directories named %q contains the others", dirs)
}

// crashTree is what CrashClone finds a power loss would leave, by name
// relative to the cloned root.
type crashTree struct {
	kept      map[*crashDir]map[string]*crashNode // the unsynced changes of names kept
	dirs      map[string]bool                     // the directories
	nodes     map[string]*crashNode               // the tracked files
	untracked map[string]string                   // the untracked files: path on disk
}

// durableTreeLocked adds to t the directory rel, whose entries d tracks
// (nil: none) and which is now at disk (""; nowhere): its durable entries,
// with the unsynced changes t keeps, and the untracked entries on disk,
// each directory among them in turn.
func (c *CrashFS) durableTreeLocked(t *crashTree, rel, disk string, d *crashDir) error {
	t.dirs[rel] = true
	entries := make(map[string]*crashNode)
	if d != nil {
		for base, n := range d.dur {
			entries[base] = n
		}
		for base, n := range t.kept[d] {
			entries[base] = n
		}
	}
	for _, base := range sortedKeys(entries) {
		switch n := entries[base]; {
		case n == nil:
		case n.contents != nil:
			if err := c.durableTreeLocked(t, filepath.Join(rel, base), n.path, n.contents); err != nil {
				return err
			}
		default:
			t.nodes[filepath.Join(rel, base)] = n
		}
	}
	if disk == "" {
		return nil
	}
	names, err := c.inner.ReadDir(disk)
	if err != nil {
		return fmt.Errorf("vfs: CrashClone: %w", err)
	}
	for _, name := range names {
		if d != nil {
			if _, tracked := d.dur[name]; tracked {
				continue
			}
		}
		childRel, childPath := filepath.Join(rel, name), filepath.Join(disk, name)
		if _, err := c.inner.ReadDir(childPath); err == nil {
			if err := c.durableTreeLocked(t, childRel, childPath, c.dirs[childPath]); err != nil {
				return err
			}
			continue
		}
		t.untracked[childRel] = childPath
	}
	return nil
}

// imageLocked returns the content a crash leaves in node n: its durable
// content, found by undoing the unsynced log from the current content,
// with the surviving part of the log replayed over it.
func (c *CrashFS) imageLocked(n *crashNode, opts *CrashOptions) ([]byte, error) {
	durable, cur, name, err := c.durableContentLocked(n)
	if err != nil {
		return nil, err
	}
	return replayLocked(n, durable, cur, name, opts)
}

// durableContentLocked returns n's durable content, its current content
// and a name for it.
func (c *CrashFS) durableContentLocked(n *crashNode) (durable, cur []byte, name string, err error) {
	if n.unknown != nil {
		return nil, nil, "", n.unknown
	}
	switch {
	case n.path != "":
		cur, err = readWhole(c.inner, n.path)
	case n.held != nil:
		cur, err = readAll(n.held)
	default:
		err = errors.New("vfs: CrashFS lost a durable file that has no name") // a bookkeeping bug
	}
	if err != nil {
		return nil, nil, "", err
	}
	name = n.path
	if name == "" {
		name = n.held.Name() + " (removed)"
	}
	if len(n.log) > 0 && int64(len(cur)) != n.log[len(n.log)-1].endSize() ||
		len(n.log) == 0 && !n.hasBase && int64(len(cur)) != n.syncedSize {
		return nil, nil, "", fmt.Errorf("vfs: CrashClone: %s has %d bytes, not the size the CrashFS recorded (was it changed by other means?)", name, len(cur))
	}
	if n.hasBase {
		return bytes.Clone(n.base), cur, name, nil
	}

	durable = bytes.Clone(cur)
	for i := len(n.log) - 1; i >= 0; i-- {
		r := &n.log[i]
		if r.truncate {
			durable = resize(durable, r.prevSize)
			if r.off < r.prevSize { // it shrank the file: put back what it cut
				copy(durable[r.off:], r.prev)
			}
		} else {
			copy(durable[r.off:], r.prev)
			durable = resize(durable, r.prevSize)
		}
	}
	if int64(len(durable)) != n.syncedSize {
		return nil, nil, "", fmt.Errorf("vfs: CrashClone: undoing the unsynced writes of %s gives %d bytes, not the %d synced (a bookkeeping bug)", name, len(durable), n.syncedSize)
	}
	return durable, cur, name, nil
}

// replayLocked replays over n's durable content the unsynced writes that
// opts lets survive, and gives the result the size opts lets survive.
func replayLocked(n *crashNode, durable, cur []byte, name string, opts *CrashOptions) ([]byte, error) {
	img := durable
	block := int64(crashBlockSize)
	if opts.BlockSize > 0 {
		block = int64(opts.BlockSize)
	}
	lastWrite := -1
	for i := range n.log {
		if !n.log[i].truncate {
			lastWrite = i
		}
	}
	// With sizes kept apart from the data, the records before cut are
	// those whose size changes survive, and size is the size they leave.
	sized := opts.KeepUnsyncedSizes == KeepPrefix || opts.KeepUnsyncedSizes == KeepAll
	var cut int
	var size int64
	if sized {
		cut, size = sizeCut(n.log, int64(len(durable)), opts)
	}
	for i := range n.log {
		r := &n.log[i]
		if r.truncate {
			if sized && i < cut || !sized && opts.keep() {
				img = resize(img, r.off)
			}
			continue
		}
		data := r.data
		if opts.TearLastWrite && i == lastWrite && opts.KeepUnsyncedFraction > 0 && len(data) > 0 {
			data = data[:opts.Rand.IntN(len(data))]
		}
		for start := r.off; start < r.off+int64(len(data)); {
			end := min((start/block+1)*block, r.off+int64(len(data)))
			if opts.keep() {
				if end > int64(len(img)) {
					img = resize(img, end)
				}
				copy(img[start:end], data[start-r.off:end-r.off])
			}
			start = end
		}
	}
	if sized {
		img = resize(img, size)
	}
	if opts.KeepUnsyncedFraction >= 1 && !opts.TearLastWrite && opts.KeepUnsyncedSizes != KeepPrefix && !n.hasBase && !bytes.Equal(img, cur) {
		return nil, fmt.Errorf("vfs: CrashClone: replaying every unsynced write of %s does not give its content (a bookkeeping bug)", name)
	}
	return img, nil
}

// sizeCut returns where the unsynced size changes of log that opts keeps
// end, apart from the data: the records before the index cut are those
// before the first size change lost (all of them if none is), and size is
// the size they leave a file whose durable size is durableSize. A record
// changes the size if it leaves it other than it found it: a truncation to
// another size, a write past the end.
func sizeCut(log []crashRecord, durableSize int64, opts *CrashOptions) (cut int, size int64) {
	after := func(size int64, r *crashRecord) int64 {
		if r.truncate {
			return r.off
		}
		return max(size, r.off+int64(len(r.data)))
	}
	var changes []int // the records that change the size
	size = durableSize
	for i := range log {
		next := after(size, &log[i])
		if next != size {
			changes = append(changes, i)
		}
		size = next
	}
	kept := len(changes)
	if opts.KeepUnsyncedSizes == KeepPrefix && kept > 0 {
		kept = opts.Rand.IntN(kept + 1)
	}
	if kept == len(changes) {
		return len(log), size
	}
	cut, size = changes[kept], durableSize
	for i := range cut {
		size = after(size, &log[i])
	}
	return cut, size
}

// resize returns b with length n, zero-filled where it grows.
func resize(b []byte, n int64) []byte {
	if n <= int64(len(b)) {
		return b[:n]
	}
	return append(b, make([]byte, n-int64(len(b)))...)
}

// within reports whether path is root or below it; both are clean.
func within(root, path string) bool {
	if root == path || root == "." && !filepath.IsAbs(path) && path != ".." && !strings.HasPrefix(path, ".."+string(filepath.Separator)) {
		return true
	}
	return strings.HasPrefix(path, strings.TrimSuffix(root, string(filepath.Separator))+string(filepath.Separator))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// readWhole returns the content of the file at path.
func readWhole(fs FS, path string) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("vfs: CrashClone: %w", err)
	}
	data, err := readAll(f)
	return data, errors.Join(err, f.Close())
}

// readAll returns the content of f.
func readAll(f File) ([]byte, error) {
	size, err := f.Size()
	if err != nil {
		return nil, fmt.Errorf("vfs: CrashClone: %w", err)
	}
	return readRange(f, 0, size)
}

// writeWhole creates the file at path (which must not exist) with data.
func writeWhole(fs FS, path string, data []byte) error {
	f, err := fs.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("vfs: CrashClone: %w", err)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("vfs: CrashClone: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("vfs: CrashClone: %w", err)
	}
	return nil
}
