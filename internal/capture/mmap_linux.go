package capture

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps a regular file read-only for sequential reading, or returns
// nil (not a regular file, empty, too large to map, or mmap refused):
// the caller then reads it through its buffered reader.
func mapFile(f *os.File) []byte {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() <= pcapFileHeader || int64(int(st.Size())) != st.Size() {
		return nil
	}
	mm, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	_ = unix.Madvise(mm, unix.MADV_SEQUENTIAL) // readahead; a hint only
	return mm
}

func unmapFile(mm []byte) { _ = unix.Munmap(mm) }

// dropMapped unmaps read pages of a shared file mapping from the process;
// the page cache keeps them, and a later read faults them back in.
func dropMapped(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTNEED) }
