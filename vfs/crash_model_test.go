package vfs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// refFile is the reference model's inode.
type refFile struct{ cur, dur []byte }

func refResize(b []byte, n int) []byte {
	if n <= len(b) {
		return append([]byte(nil), b[:n]...)
	}
	return append(append([]byte(nil), b...), make([]byte, n-len(b))...)
}

// TestCrashFSMatchesAReferenceModel runs random operations (several files
// and handles, renames, removals, truncation, directory syncs) through
// a CrashFS and a simple reference model (an inode's content is durable
// as of its last fdatasync, a name as of the last sync of its directory)
// and compares the clone that keeps nothing unsynced with the model.
func TestCrashFSMatchesAReferenceModel(t *testing.T) {
	for seed := range uint64(80) {
		rng := newRand(seed)
		dir := t.TempDir()
		c := NewCrashFS(Default)
		names := []string{"a", "b", "c", "d"}
		var inodes []*refFile
		handles := map[int][]File{} // inode -> open handles
		cur := map[string]int{}
		dur := map[string]int{}
		var log []string
		for step := 0; step < 60; step++ {
			switch op := rng.IntN(9); op {
			case 0: // create
				n := names[rng.IntN(len(names))]
				if _, ok := cur[n]; ok {
					continue
				}
				f, err := c.OpenFile(filepath.Join(dir, n), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
				if err != nil {
					t.Fatal(err)
				}
				inodes = append(inodes, &refFile{})
				cur[n] = len(inodes) - 1
				handles[len(inodes)-1] = append(handles[len(inodes)-1], f)
				log = append(log, "create "+n)
			case 1, 2: // write
				if len(inodes) == 0 {
					continue
				}
				i := rng.IntN(len(inodes))
				if len(handles[i]) == 0 {
					continue
				}
				f := handles[i][rng.IntN(len(handles[i]))]
				off := rng.IntN(3 * crashBlockSize)
				data := make([]byte, 1+rng.IntN(2*crashBlockSize))
				for k := range data {
					data[k] = byte('A' + rng.IntN(26))
				}
				if _, err := f.WriteAt(data, int64(off)); err != nil {
					t.Fatal(err)
				}
				r := inodes[i]
				if off+len(data) > len(r.cur) {
					r.cur = refResize(r.cur, off+len(data))
				}
				copy(r.cur[off:], data)
				log = append(log, fmt.Sprintf("write ino %d [%d,%d)", i, off, off+len(data)))
			case 3: // truncate
				if len(inodes) == 0 {
					continue
				}
				i := rng.IntN(len(inodes))
				if len(handles[i]) == 0 {
					continue
				}
				size := rng.IntN(4 * crashBlockSize)
				if err := handles[i][0].Truncate(int64(size)); err != nil {
					t.Fatal(err)
				}
				inodes[i].cur = refResize(inodes[i].cur, size)
				log = append(log, fmt.Sprintf("truncate ino %d %d", i, size))
			case 4: // sync
				if len(inodes) == 0 {
					continue
				}
				i := rng.IntN(len(inodes))
				if len(handles[i]) == 0 {
					continue
				}
				if err := handles[i][len(handles[i])-1].Sync(); err != nil {
					t.Fatal(err)
				}
				inodes[i].dur = append([]byte(nil), inodes[i].cur...)
				log = append(log, fmt.Sprintf("sync ino %d", i))
			case 5: // rename
				a, b := names[rng.IntN(len(names))], names[rng.IntN(len(names))]
				i, ok := cur[a]
				if !ok || a == b {
					continue
				}
				if err := c.Rename(filepath.Join(dir, a), filepath.Join(dir, b)); err != nil {
					t.Fatal(err)
				}
				delete(cur, a)
				cur[b] = i
				log = append(log, "rename "+a+" "+b)
			case 6: // remove
				a := names[rng.IntN(len(names))]
				if _, ok := cur[a]; !ok {
					continue
				}
				if err := c.Remove(filepath.Join(dir, a)); err != nil {
					t.Fatal(err)
				}
				delete(cur, a)
				log = append(log, "remove "+a)
			case 7: // syncdir
				if err := c.SyncDir(dir); err != nil {
					t.Fatal(err)
				}
				dur = map[string]int{}
				for k, v := range cur {
					dur[k] = v
				}
				log = append(log, "syncdir")
			case 8: // reopen by name, maybe O_TRUNC
				a := names[rng.IntN(len(names))]
				i, ok := cur[a]
				if !ok {
					continue
				}
				flag := os.O_RDWR
				if rng.IntN(3) == 0 {
					flag |= os.O_TRUNC
					inodes[i].cur = nil
				}
				f, err := c.OpenFile(filepath.Join(dir, a), flag, 0)
				if err != nil {
					t.Fatal(err)
				}
				handles[i] = append(handles[i], f)
				log = append(log, fmt.Sprintf("open %s flag %d", a, flag))
			}
		}
		got := cloneTree(t, c, keepNone)
		want := map[string]string{}
		for n, i := range dur {
			want[n] = string(inodes[i].dur)
		}
		for n := range want {
			if got[n] != want[n] {
				t.Fatalf("seed %d: %s: clone holds %d bytes, the model %d\n%v", seed, n, len(got[n]), len(want[n]), log)
			}
		}
		for n := range got {
			if _, ok := want[n]; !ok {
				t.Fatalf("seed %d: clone holds %s, the model has no durable name for it\n%v", seed, n, log)
			}
		}
		gotAll := cloneTree(t, c, keepAll)
		for n := range gotAll {
			var wantAll string
			if i, ok := dur[n]; ok {
				wantAll = string(inodes[i].cur)
			}
			if gotAll[n] != wantAll {
				t.Fatalf("seed %d: keepAll: %s differs\n%v", seed, n, log)
			}
		}
		for _, hs := range handles {
			for _, f := range hs {
				_ = f.Close()
			}
		}
	}
}
