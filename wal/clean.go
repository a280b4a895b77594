package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/klauspost/crc32"

	"github.com/walbroker/walbroker/vfs"
)

// The clean mark is the file CLEAN, written by Close once every record is
// synced: the position where the log ends, and a CRC-32C of it (12 bytes,
// little-endian). Open reads it and removes it, durably, before anything can
// be appended; while it is there, the last segment holds nothing valid past
// that position, so Open scans the segment only up to it. Without the mark
// (a crash, or an older log), Open reads the whole segment: after the end it
// must look for frames a power loss kept while losing earlier ones, which
// means reading the zero-filled rest of the file.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func writeCleanMark(fs vfs.FS, dir string, end Position) error {
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:], uint64(end))
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b[:8], castagnoli))
	path := filepath.Join(dir, cleanName)
	f, err := fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("wal: close: %w", err)
	}
	_, err = f.WriteAt(b[:], 0)
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil {
		err = fs.SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("wal: close: write %s: %w", path, err)
	}
	return nil
}

// readCleanMark returns the position a clean mark records, if dir has a
// valid one. A mark that is not there, or is damaged (short, or failing
// its checksum), is no mark (Open then reads the whole tail). An error
// opening or reading it (an I/O error; or a mark refused as planted,
// [vfs.ErrForeign]: a store whose directory someone else writes in must
// not carry on) is returned: a mark that may be whole says where synced
// records end, and Open without it would zero damage to them as a torn
// tail, then remove the mark.
func readCleanMark(fs vfs.FS, dir string) (Position, bool, error) {
	path := filepath.Join(dir, cleanName)
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	var b [12]byte
	if n, err := f.ReadAt(b[:], 0); n != len(b) {
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.EISDIR) {
			return 0, false, fmt.Errorf("read %s: %w", path, err)
		}
		return 0, false, nil // cut short, or no file: damaged
	}
	if binary.LittleEndian.Uint32(b[8:]) != crc32.Checksum(b[:8], castagnoli) {
		return 0, false, nil
	}
	return Position(binary.LittleEndian.Uint64(b[:])), true, nil
}
