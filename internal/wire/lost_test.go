package wire

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/interval"
	ldsv1 "github.com/lds-net/lds/proto/lds/v1"
)

// assemble feeds frames to a fresh Assembler of p and returns the
// interval it completes, or the error it ends with.
func assemble(t *testing.T, pRx, pTx interval.Params, frames []*ldsv1.SenderFrame) (*Interval, error) {
	t.Helper()
	a := NewAssembler(pRx, testLimits(pRx))
	var iv *Interval
	for _, f := range frames {
		res, err := a.Frame(f)
		if err != nil {
			return nil, err
		}
		if res != nil && res.Kind == Complete {
			iv = res.Interval
		}
	}
	return iv, nil
}

// TestAssemblerLostTable: the lost-packet table travels in its own chunk
// and arrives as the sender built it; a table where the receiver keeps
// none, none where it keeps one, one of another size or a garbled one is
// refused with an error that says which.
func TestAssemblerLostTable(t *testing.T) {
	on := testParams()
	on.LostCells = 30
	off := testParams()
	si := makeInterval(t, on, 7, 500, 9)
	want := si.Sk.Lost.AppendBinary(nil)
	iv, err := assemble(t, on, on, encodeAll(t, 256, si))
	if err != nil || iv == nil || iv.Lost == nil {
		t.Fatalf("assembled %v, %v", iv, err)
	}
	if got := iv.Lost.AppendBinary(nil); !bytes.Equal(got, want) {
		t.Fatal("the table arrived different from the one sent")
	}
	other := testParams()
	other.LostCells = 27 // smaller: a larger one is refused by size first
	for _, c := range []struct {
		name   string
		rx     interval.Params
		frames []*ldsv1.SenderFrame
		want   string
	}{
		{"table, receiver without", off, encodeAll(t, 256, makeInterval(t, on, 7, 50, 9)), "CHUNK_KIND_LOST"},
		{"no table, receiver with one", on, encodeAll(t, 256, makeInterval(t, off, 7, 50, 9)), "no lost-packet table"},
		{"table of another size", on, encodeAll(t, 1<<20, makeInterval(t, other, 7, 50, 9)), "lost-packet table"},
		{"garbled table", on, garbleLost(encodeAll(t, 1<<20, makeInterval(t, on, 7, 50, 9))), "lost-packet table"},
	} {
		if _, err := assemble(t, c.rx, on, c.frames); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
}

func garbleLost(fr []*ldsv1.SenderFrame) []*ldsv1.SenderFrame {
	for _, f := range fr {
		if c := f.GetChunk(); c != nil && c.Kind == ldsv1.ChunkKind_CHUNK_KIND_LOST {
			c.Data[0] ^= 0xff // the magic
		}
	}
	return fr
}
