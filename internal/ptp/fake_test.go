package ptp

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/facebook/time/ptp/protocol"
)

// Offsets into a management request (IEEE 1588 Tables 35, 56, 58).
const (
	reqSeqOff    = 30 // header sequenceId
	reqMgmtIDOff = 52 // 34 header + 10 target + 4 hops/action + 4 TLV type/length
)

// fakePTP4l is a unixgram responder standing in for ptp4l in corner-case
// tests. respond gets the request's managementId and sequenceId and
// returns the datagrams to send back (none = silence).
type fakePTP4l struct {
	path    string
	conn    *net.UnixConn
	respond func(id protocol.ManagementID, seq uint16) [][]byte
	wg      sync.WaitGroup
}

func startFake(t *testing.T, path string, respond func(protocol.ManagementID, uint16) [][]byte) *fakePTP4l {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatalf("fake ptp4l: %v", err)
	}
	f := &fakePTP4l{path: path, conn: conn, respond: respond}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		buf := make([]byte, 2048)
		for {
			n, from, err := conn.ReadFromUnix(buf)
			if err != nil {
				return
			}
			if n < reqMgmtIDOff+2 || from == nil {
				continue
			}
			id := protocol.ManagementID(binary.BigEndian.Uint16(buf[reqMgmtIDOff:]))
			seq := binary.BigEndian.Uint16(buf[reqSeqOff:])
			for _, d := range f.respond(id, seq) {
				_, _ = conn.WriteToUnix(d, from) // a lost reply is what a timeout test wants anyway
			}
		}
	}()
	t.Cleanup(f.stop)
	return f
}

func (f *fakePTP4l) stop() {
	f.conn.Close()
	f.wg.Wait()
	_ = os.Remove(f.path)
}

func fakeSocket(t *testing.T) string {
	// Short path: t.TempDir() names can exceed a sun_path.
	dir, err := os.MkdirTemp("", "ldsptpt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "ptp4l")
}

func mgmtHead(seq uint16) protocol.ManagementMsgHead {
	return protocol.ManagementMsgHead{
		Header: protocol.Header{
			SdoIDAndMsgType: protocol.NewSdoIDAndMsgType(protocol.MessageManagement, 0),
			Version:         protocol.Version,
			SequenceID:      seq,
		},
		ActionField: protocol.RESPONSE,
	}
}

// encodeReply builds a RESPONSE datagram the way ptp4l lays it out.
func encodeReply(t testing.TB, seq uint16, tlv protocol.ManagementTLV) []byte {
	t.Helper()
	p := protocol.Management{ManagementMsgHead: mgmtHead(seq), TLV: tlv}
	b, err := p.MarshalBinary()
	if err != nil {
		t.Fatalf("encoding reply: %v", err)
	}
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[50:], uint16(len(b)-52)) // TLV lengthField
	return b
}

func encodeErrorReply(t testing.TB, seq uint16, id protocol.ManagementID, code protocol.ManagementErrorID) []byte {
	t.Helper()
	p := protocol.ManagementMsgErrorStatus{
		ManagementMsgHead: mgmtHead(seq),
		ManagementErrorStatusTLV: protocol.ManagementErrorStatusTLV{
			TLVHead:           protocol.TLVHead{TLVType: protocol.TLVManagementErrorStatus, LengthField: 8},
			ManagementErrorID: code,
			ManagementID:      id,
		},
	}
	var buf bytes.Buffer
	if err := p.MarshalBinaryToBuf(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	return b
}

// world is what a fake ptp4l reports.
type world struct {
	offsetNS   int64
	ingressNS  int64
	gmPresent  bool
	gmID       uint64
	pathDelay  float64 // ns
	steps      uint16
	portState  protocol.PortState
	ifaceName  string
	brokenTLVs map[protocol.ManagementID][]byte // raw override per request
}

func mgmtTLVHead(id protocol.ManagementID) protocol.ManagementTLVHead {
	return protocol.ManagementTLVHead{TLVHead: protocol.TLVHead{TLVType: protocol.TLVManagement}, ManagementID: id}
}

func (w world) reply(t testing.TB, id protocol.ManagementID, seq uint16) []byte {
	if raw, ok := w.brokenTLVs[id]; ok {
		return raw
	}
	var tlv protocol.ManagementTLV
	switch id {
	case protocol.IDTimeStatusNP:
		gm := int32(0)
		if w.gmPresent {
			gm = 1
		}
		tlv = &protocol.TimeStatusNPTLV{
			ManagementTLVHead: mgmtTLVHead(id),
			MasterOffsetNS:    w.offsetNS,
			IngressTimeNS:     w.ingressNS,
			GMPresent:         gm,
			GMIdentity:        protocol.ClockIdentity(w.gmID),
		}
	case protocol.IDCurrentDataSet:
		tlv = &protocol.CurrentDataSetTLV{
			ManagementTLVHead: mgmtTLVHead(id),
			StepsRemoved:      w.steps,
			OffsetFromMaster:  protocol.NewTimeInterval(float64(w.offsetNS)),
			MeanPathDelay:     protocol.NewTimeInterval(w.pathDelay),
		}
	case protocol.IDPortPropertiesNP:
		tlv = &protocol.PortPropertiesNPTLV{
			ManagementTLVHead: mgmtTLVHead(id),
			PortIdentity:      protocol.PortIdentity{ClockIdentity: 1, PortNumber: 1},
			PortState:         w.portState,
			Interface:         protocol.PTPText(w.ifaceName),
		}
	default:
		return encodeErrorReply(t, seq, id, protocol.ErrorNoSuchID)
	}
	return encodeReply(t, seq, tlv)
}

func goodWorld() world {
	return world{
		offsetNS:  -1234,
		ingressNS: 1_700_000_000_123_456_789,
		gmPresent: true,
		gmID:      0x0011_2233_4455_6677,
		pathDelay: 567.25,
		steps:     2,
		portState: protocol.PortStateSlave,
		ifaceName: "eth7",
	}
}

// sim is a fake ptp4l that behaves like a measuring one: each
// TIME_STATUS_NP request stands for one more Sync (ingress_time advances,
// the offset jitters), and CURRENT_DATA_SET reports that same offset.
type sim struct {
	mu     sync.Mutex
	w      world
	base   int64
	syncs  int
	jitter []int64
}

func newSim(w world) *sim {
	return &sim{w: w, base: w.offsetNS, jitter: []int64{0, 3, -2, 5}}
}

func (s *sim) respond(t testing.TB, id protocol.ManagementID, seq uint16) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == protocol.IDTimeStatusNP {
		s.syncs++
		s.w.ingressNS += 62_500_000
		s.w.offsetNS = s.base + s.jitter[s.syncs%len(s.jitter)]
	}
	return [][]byte{s.w.reply(t, id, seq)}
}

func (s *sim) current() world {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w
}
