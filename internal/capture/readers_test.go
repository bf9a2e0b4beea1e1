package capture

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

// countedSource is a Source that only counts its Close calls.
type countedSource struct {
	snaplen int
	closed  *int
}

func (s countedSource) ReadPacket([]byte) ([]byte, int64, int, error) { return nil, 0, 0, io.EOF }
func (countedSource) LinkType() layers.LinkType                       { return layers.LinkTypeEthernet }
func (countedSource) Stats() (DropStats, error)                       { return DropStats{}, nil }
func (s countedSource) Snaplen() int                                  { return s.snaplen }
func (s countedSource) Close() error {
	*s.closed++
	return nil
}

func TestOpenReaders(t *testing.T) {
	path, _ := randomPcap(t, 10, 1)
	cfg := DefaultConfig()
	cfg.Identity.Seed = "test-seed"
	cfg.Source.File = path
	missing := cfg
	missing.Source.File = filepath.Join(t.TempDir(), "missing.pcap")
	noSeed := cfg
	noSeed.Identity.Seed = ""
	for _, tc := range []struct {
		name     string
		snaplens []int // given sources; nil: open cfg.Source
		cfg      Config
		readers  int // 0: an error
	}{
		{"given", []int{65535, 0}, cfg, 2},
		{"given, one too short", []int{65535, 95}, cfg, 0},
		{"given, bad identity", []int{65535}, noSeed, 0},
		{"opened", nil, cfg, 1},
		{"opened, missing", nil, missing, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closed := 0
			var srcs []Source
			for _, n := range tc.snaplens {
				srcs = append(srcs, countedSource{snaplen: n, closed: &closed})
			}
			readers, release, err := OpenReaders(srcs, tc.cfg, nil)
			if tc.readers == 0 {
				if err == nil {
					t.Fatal("no error")
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if len(readers) != tc.readers {
					t.Fatalf("%d readers, want %d", len(readers), tc.readers)
				}
				if readers[0].Parser() == nil || (len(readers) > 1 && readers[0].Parser() == readers[1].Parser()) {
					t.Error("readers share a parser")
				}
				release()
			}
			if closed != 0 {
				t.Errorf("closed %d of the caller's sources", closed)
			}
		})
	}
}
