package ptp

import (
	"encoding/binary"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/facebook/time/ptp/protocol"
)

// memConn answers the i-th request with replies[i], its sequenceId
// patched to match, so the fuzzer reaches the TLV decoders.
type memConn struct {
	replies [][]byte
	client  *protocol.MgmtClient
}

func (m *memConn) Write(b []byte) (int, error) { return len(b), nil }

func (m *memConn) Read(b []byte) (int, error) {
	if len(m.replies) == 0 {
		return 0, io.EOF
	}
	n := copy(b, m.replies[0])
	m.replies = m.replies[1:]
	if n >= seqOffset+2 {
		binary.BigEndian.PutUint16(b[seqOffset:], m.client.Sequence)
	}
	return n, nil
}

// FuzzReply feeds arbitrary datagrams as the answers to the three
// queries of a poll: the result must be an error or a complete answer,
// never a panic.
func FuzzReply(f *testing.F) {
	w := goodWorld()
	ts := w.reply(f, protocol.IDTimeStatusNP, 1)
	cd := w.reply(f, protocol.IDCurrentDataSet, 1)
	pp := w.reply(f, protocol.IDPortPropertiesNP, 1)
	f.Add(ts, cd, pp)
	f.Add(ts, cd, encodeErrorReply(f, 1, protocol.IDPortPropertiesNP, protocol.ErrorNotSupported))
	f.Add(ts, cd, pp[:len(pp)-3])
	f.Add(ts, pp, cd)
	f.Add([]byte{}, make([]byte, 40), []byte{0xd})
	f.Fuzz(func(t *testing.T, a, b, c []byte) {
		cl := &protocol.MgmtClient{}
		mc := &memConn{replies: [][]byte{a, b, c}, client: cl}
		cl.Connection = &seqFilter{rw: mc, client: cl}
		r, err := queryAll(cl, nil, time.Second, time.Time{})
		if err != nil {
			return
		}
		if r.ts == nil || r.cd == nil || r.pp == nil {
			t.Fatalf("success without all TLVs: %+v", r)
		}
		var s Status
		r.apply(&s, &offsetTracker{}, time.Now())
		if s.PortState == "" {
			t.Fatalf("empty port state text for %d", r.pp.PortState)
		}
	})
}

func TestSafelyRecoversPanics(t *testing.T) {
	err := safely(func() error { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("panic not turned into an error: %v", err)
	}
}
