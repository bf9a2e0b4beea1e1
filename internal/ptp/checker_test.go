package ptp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/facebook/time/ptp/protocol"
)

func testChecker(t *testing.T, socket string, mod func(*Config), log *slog.Logger) *Checker {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Socket = socket
	cfg.Timeout = 200 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// responder answers one management request with the datagrams a fake ptp4l
// sends back.
type responder func(t testing.TB, id protocol.ManagementID, seq uint16) [][]byte

// pollCase is one case of TestPollAgainstFakeResponder.
type pollCase struct {
	name    string
	respond responder
	sim     *sim                 // a measuring ptp4l; used when respond is nil
	wrap    func(*sim) responder // tampers with sim's replies
	polls   int
	wantErr []string                              // substrings of the error; nil = success
	check   func(t *testing.T, s Status, w world) // w: the sim's world at the end
}

func TestPollAgainstFakeResponder(t *testing.T) {
	good := goodWorld()
	garbage := func(t testing.TB, id protocol.ManagementID, seq uint16) [][]byte {
		b := make([]byte, 120)
		r := rand.New(rand.NewPCG(uint64(seq), 7))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		binary.BigEndian.PutUint16(b[reqSeqOff:], seq) // pass the sequence filter
		return [][]byte{b}
	}

	tests := []pollCase{
		{name: "good answer", sim: newSim(good), polls: 2, check: func(t *testing.T, s Status, w world) {
			want := Status{
				State: StateSynced, Reachable: true, GrandmasterPresent: true,
				GrandmasterID: "001122.3344.556677", PortState: "SLAVE",
				OffsetNS: w.offsetNS, MeanPathDelayNS: 567, StepsRemoved: 2,
				IngressTimeNS: w.ingressNS, Interface: "eth7", OffsetMeasured: true,
			}
			s.LastOK, s.OffsetUpdated = time.Time{}, time.Time{}
			if s != want {
				t.Fatalf("status\n got %+v\nwant %+v", s, want)
			}
		}},
		{name: "first poll cannot tell a measured offset from a left-over one", sim: newSim(good), polls: 1,
			check: func(t *testing.T, s Status, w world) {
				if s.State != StateUnsynced || s.OffsetMeasured || s.OffsetNS != w.offsetNS {
					t.Fatalf("status %+v", s)
				}
			}},
		{name: "late reply of an earlier request is skipped", polls: 2, sim: newSim(good),
			wrap: func(sm *sim) responder {
				return func(t testing.TB, id protocol.ManagementID, seq uint16) [][]byte {
					stale := good
					stale.offsetNS = 999_999
					stale.portState = protocol.PortStateListening
					return append([][]byte{stale.reply(t, id, seq-1)}, sm.respond(t, id, seq)...)
				}
			},
			check: func(t *testing.T, s Status, w world) {
				if s.OffsetNS != w.offsetNS || s.PortState != "SLAVE" || s.State != StateSynced {
					t.Fatalf("took the stale reply: %+v", s)
				}
			}},
		{name: "duplicated replies do not shift later answers", polls: 3, sim: newSim(good),
			wrap: func(sm *sim) responder {
				return func(t testing.TB, id protocol.ManagementID, seq uint16) [][]byte {
					r := sm.respond(t, id, seq)
					return append(r, r...)
				}
			},
			check: func(t *testing.T, s Status, w world) {
				if s.State != StateSynced || s.PortState != "SLAVE" || s.StepsRemoved != 2 || s.OffsetNS != w.offsetNS {
					t.Fatalf("status %+v", s)
				}
			}},
		{name: "silence times out", polls: 1,
			respond: func(testing.TB, protocol.ManagementID, uint16) [][]byte { return nil },
			wantErr: []string{"GET TIME_STATUS_NP", "i/o timeout"}},
		{name: "garbage", polls: 1, respond: garbage, wantErr: []string{"GET TIME_STATUS_NP"}},
		{name: "short datagram", polls: 1,
			respond: func(testing.TB, protocol.ManagementID, uint16) [][]byte { return [][]byte{{1, 2, 3, 4, 5}} },
			wantErr: []string{"GET TIME_STATUS_NP"}},
		{name: "answer with the wrong TLV", polls: 1,
			respond: func(t testing.TB, _ protocol.ManagementID, seq uint16) [][]byte {
				return [][]byte{good.reply(t, protocol.IDCurrentDataSet, seq)}
			},
			wantErr: []string{"GET TIME_STATUS_NP", "unexpected management TLV"}},
		{name: "management error status", polls: 1,
			respond: func(t testing.TB, id protocol.ManagementID, seq uint16) [][]byte {
				if id == protocol.IDPortPropertiesNP {
					return [][]byte{encodeErrorReply(t, seq, id, protocol.ErrorNotSupported)}
				}
				return [][]byte{good.reply(t, id, seq)}
			},
			wantErr: []string{"GET PORT_PROPERTIES_NP", "NOT_SUPPORTED"}},
		{name: "truncated TIME_STATUS_NP", polls: 1,
			respond: func(t testing.TB, id protocol.ManagementID, seq uint16) [][]byte {
				return [][]byte{good.reply(t, id, seq)[:70]}
			},
			wantErr: []string{"GET TIME_STATUS_NP"}},
		{name: "interface text longer than the datagram", polls: 1,
			respond: func(t testing.TB, id protocol.ManagementID, seq uint16) [][]byte {
				r := good.reply(t, id, seq)
				if id == protocol.IDPortPropertiesNP {
					r[len(r)-len("eth7")-1] = 200
				}
				return [][]byte{r}
			},
			wantErr: []string{"GET PORT_PROPERTIES_NP"}},
		{name: "unknown port state", polls: 2,
			sim: func() *sim { w := good; w.portState = 77; return newSim(w) }(),
			check: func(t *testing.T, s Status, _ world) {
				if s.PortState != "UNKNOWN(77)" || s.State != StateUnsynced {
					t.Fatalf("status %+v", s)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runPollCase(t, tc) })
	}
}

// runPollCase polls a checker tc.polls times against tc's fake ptp4l and
// holds the last outcome to tc.wantErr or tc.check.
func runPollCase(t *testing.T, tc pollCase) {
	path := fakeSocket(t)
	respond := tc.respond
	switch {
	case tc.wrap != nil:
		respond = tc.wrap(tc.sim)
	case respond == nil:
		respond = tc.sim.respond
	}
	startFake(t, path, func(id protocol.ManagementID, seq uint16) [][]byte { return respond(t, id, seq) })
	c := testChecker(t, path, nil, nil)
	var s Status
	var err error
	for range tc.polls {
		// A poll ends on its per-request timeouts: one that does not
		// return for a minute waits on something else (a hang, not a
		// slow machine).
		done := make(chan struct{})
		go func() { s, err = c.Poll(context.Background()); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("poll did not return within a minute with a %s timeout per request", c.cfg.Timeout)
		}
	}
	if tc.wantErr == nil {
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		tc.check(t, s, tc.sim.current())
		return
	}
	if err == nil {
		t.Fatalf("want error, got status %+v", s)
	}
	for _, w := range tc.wantErr {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if s.Reachable || s.Err != err.Error() || s.State != StateUnknown {
		t.Errorf("after a failed first poll: %+v", s)
	}
}

// countingHandler counts records by level and message prefix.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logSink) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), substr)
}

func TestAbsentPtp4lWarnsOnceAndStaysUnknown(t *testing.T) {
	sink := &logSink{}
	log := slog.New(slog.NewTextHandler(sink, nil))
	socket := fakeSocket(t) // nothing listens there
	c := testChecker(t, socket, func(c *Config) {
		c.PollInterval = 20 * time.Millisecond
		c.Grace = 20 * time.Millisecond
	}, log)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() { // readers race with Run (go test -race)
		defer close(done)
		for ctx.Err() == nil {
			if st := c.Status().State; st != StateUnknown {
				t.Errorf("state %q while ptp4l never answered", st)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	<-done
	s := c.Status()
	if s.State != StateUnknown || s.Reachable {
		t.Fatalf("status %+v", s)
	}
	if !strings.Contains(s.Err, socket) {
		t.Errorf("error %q does not name the socket %s", s.Err, socket)
	}
	if n := sink.count("level=WARN msg=\"cannot read clock status"); n != 1 {
		t.Errorf("%d outage warnings over ~15 polls, want exactly 1; log:\n%s", n, sink.buf.String())
	}
	if n := sink.count("ptp.enabled: false"); n < 1 {
		t.Errorf("warning does not say how to run without PTP; log:\n%s", sink.buf.String())
	}
}

func TestOutageGraceAndRecovery(t *testing.T) {
	sink := &logSink{}
	log := slog.New(slog.NewTextHandler(sink, nil))
	path := fakeSocket(t)
	sm := newSim(goodWorld())
	respond := func(id protocol.ManagementID, seq uint16) [][]byte { return sm.respond(t, id, seq) }
	f := startFake(t, path, respond)
	c := testChecker(t, path, nil, log)

	_, _ = c.Poll(context.Background()) // the first poll only primes the checker
	s, err := c.Poll(context.Background())
	if err != nil || s.State != StateSynced {
		t.Fatalf("first poll: %v, %+v", err, s)
	}
	clientDir := c.conn.dir
	okAt := s.LastOK

	f.stop() // ptp4l goes away
	s, err = c.Poll(context.Background())
	if err == nil || s.Reachable {
		t.Fatalf("poll of a stopped ptp4l: err=%v status=%+v", err, s)
	}
	if _, statErr := os.Stat(clientDir); !errors.Is(statErr, os.ErrNotExist) {
		t.Errorf("client socket dir %s not removed after a failed poll: %v", clientDir, statErr)
	}
	grace := c.cfg.Grace
	if got := c.statusAt(okAt.Add(grace)).State; got != StateSynced {
		t.Errorf("within grace: %q, want synced (held)", got)
	}
	if got := c.statusAt(okAt.Add(grace + time.Millisecond)).State; got != StateUnsynced {
		t.Errorf("after grace: %q, want unsynced", got)
	}

	startFake(t, path, respond) // ptp4l restarts on the same path
	s, err = c.Poll(context.Background())
	if err != nil || !s.Reachable || s.Err != "" {
		t.Fatalf("after restart: %v, %+v", err, s)
	}
	// A restarted ptp4l's offset must prove itself again (offsetTracker).
	if s.State != StateUnsynced || s.OffsetMeasured {
		t.Fatalf("first poll after restart: %+v", s)
	}
	if s, err = c.Poll(context.Background()); err != nil || s.State != StateSynced {
		t.Fatalf("second poll after restart: %v, %+v", err, s)
	}
	if n := sink.count("level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, sink.buf.String())
	}
	if n := sink.count("ptp4l answers again"); n != 1 {
		t.Errorf("%d recovery notes, want 1:\n%s", n, sink.buf.String())
	}
}

func TestOffsetFreshnessFollowsIngressTime(t *testing.T) {
	path := fakeSocket(t)
	var mu sync.Mutex
	w := goodWorld()
	startFake(t, path, func(id protocol.ManagementID, seq uint16) [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return [][]byte{w.reply(t, id, seq)}
	})
	c := testChecker(t, path, nil, nil)
	s1, err := c.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.Poll(context.Background()) // same ingress_time: no new Sync
	if err != nil {
		t.Fatal(err)
	}
	if !s2.OffsetUpdated.Equal(s1.LastOK) || !s2.LastOK.After(s1.LastOK) {
		t.Fatalf("offset update time moved without a new Sync: first %v, second %v (last ok %v)", s1.LastOK, s2.OffsetUpdated, s2.LastOK)
	}
	// Reachable, but no Sync for longer than grace: stale.
	if got := c.statusAt(s1.LastOK.Add(c.cfg.Grace + time.Millisecond)).State; got != StateUnsynced {
		t.Errorf("stale offset judged %q", got)
	}
	mu.Lock()
	w.ingressNS += 62_500_000
	mu.Unlock()
	s3, err := c.Poll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !s3.OffsetUpdated.Equal(s3.LastOK) {
		t.Fatalf("new Sync not noticed: %+v", s3)
	}
}

func TestPollHonoursContextCancel(t *testing.T) {
	path := fakeSocket(t)
	startFake(t, path, func(protocol.ManagementID, uint16) [][]byte { return nil })
	// The read's own timeout is an hour: only the cancel can end it.
	c := testChecker(t, path, func(c *Config) { c.Timeout = time.Hour; c.Grace = 2 * time.Hour }, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	errc := make(chan error, 1)
	go func() { _, err := c.Poll(ctx); errc <- err }()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("cancel did not interrupt a read whose timeout is an hour")
	}
}

func TestDisabled(t *testing.T) {
	c, err := New(Config{Enabled: false}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Poll(context.Background())
	if err != nil || s.State != StateDisabled {
		t.Fatalf("Poll: %v %+v", err, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Status().State != StateDisabled {
		t.Fatal("not disabled")
	}
}

// TestReacquisitionReplaysPtp4lTrace replays what linuxptp 3.1.1 reported
// (pmc, one line per Sync) when its master was killed and restarted: the
// old offset and path delay stay in TIME_STATUS_NP / CURRENT_DATA_SET while
// the port re-acquires, until a new delay measurement lands.
func TestReacquisitionReplaysPtp4lTrace(t *testing.T) {
	const gmA, gmB = 0x6ad540fffe54a558, 0x0ad6cefffe507da1
	const i0 = 1_795_302_179_000_000_000
	uncal, listening := protocol.PortStateUncalibrated, protocol.PortStateListening
	steps := []struct {
		port    protocol.PortState
		ingress int64
		offset  int64
		delay   float64
		gm      uint64
		want    State
	}{
		{uncal, i0 + 1, 301, 1181, gmA, StateUnsynced},      // first look: cannot tell yet
		{uncal, i0 + 2, 1241, 1314, gmA, StateSynced},       // offset moved: measured
		{uncal, i0 + 3, 379, 733, gmA, StateSynced},         // last Sync before the master dies
		{listening, 0, 379, 733, gmA, StateUnsynced},        // announce timeout
		{uncal, 0, 379, 733, gmA, StateUnsynced},            // new master selected, no Sync yet
		{uncal, i0 + 10, 379, 733, gmA, StateUnsynced},      // Syncs arrive, offset is left over
		{uncal, i0 + 11, 379, 733, gmA, StateUnsynced},      // still left over
		{uncal, i0 + 12, 712, 1181, gmA, StateSynced},       // first new measurement
		{uncal, i0 + 13, 491, 1181, gmA, StateSynced},       //
		{uncal, i0 + 14, 491, 1181, gmB, StateUnsynced},     // grandmaster changed under us
		{uncal, i0 + 15, 480, 1100, gmB, StateSynced},       // measured against the new one
		{uncal, i0 + 16, 200_000, 1100, gmB, StateUnsynced}, // over the limit
		{protocol.PortStateSlave, i0 + 17, 90, 1100, gmB, StateSynced},
	}
	var mu sync.Mutex
	w := goodWorld()
	path := fakeSocket(t)
	startFake(t, path, func(id protocol.ManagementID, seq uint16) [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return [][]byte{w.reply(t, id, seq)}
	})
	c := testChecker(t, path, nil, nil)
	for i, st := range steps {
		mu.Lock()
		w.portState, w.ingressNS, w.offsetNS, w.pathDelay, w.gmID = st.port, st.ingress, st.offset, st.delay, st.gm
		mu.Unlock()
		s, err := c.Poll(context.Background())
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if s.State != st.want {
			t.Fatalf("step %d (%+v): state %q, want %q; status %+v", i, st, s.State, st.want, s)
		}
	}
}

func TestClientDir(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "RUNTIME_DIRECTORY" {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		name, configured, runtimeDir, want string
	}{
		{"configured wins", "/srv/x", "/run/lds-receiver", "/srv/x"},
		{"systemd RuntimeDirectory=", "", "/run/lds-receiver", "/run/lds-receiver"},
		{"first of several runtime directories", "", "/run/lds-receiver:/run/other", "/run/lds-receiver"},
		{"neither: TMPDIR", "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := clientDir(tc.configured, env(tc.runtimeDir)); got != tc.want {
				t.Fatalf("clientDir(%q, RUNTIME_DIRECTORY=%q) = %q, want %q", tc.configured, tc.runtimeDir, got, tc.want)
			}
		})
	}
}

// TestReplySocketInClientDir: the checker's reply socket is bound under
// ptp.client_dir (where ptp4l can reach it), answered there, and removed
// on Close.
func TestReplySocketInClientDir(t *testing.T) {
	path := fakeSocket(t)
	sim := newSim(goodWorld())
	startFake(t, path, func(id protocol.ManagementID, seq uint16) [][]byte { return sim.respond(t, id, seq) })
	base, err := os.MkdirTemp("", "ldscd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	c := testChecker(t, path, func(c *Config) { c.ClientDir = base }, nil)
	if _, err := c.Poll(context.Background()); err != nil {
		t.Fatalf("Poll: %v", err)
	}
	socks, _ := filepath.Glob(filepath.Join(base, "lds-ptp-*", "c.sock"))
	if len(socks) != 1 {
		t.Fatalf("reply sockets under %s: %v, want exactly one", base, socks)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(base); len(left) != 0 {
		t.Fatalf("Close left %d entries in %s", len(left), base)
	}
}

// TestPHCDeviceMissingNamesTheDropIn: a ptp.phc device that cannot be
// opened (what the units' PrivateDevices=yes leaves) makes the state
// unsynced, and the error says how to give the unit the device.
func TestPHCDeviceMissingNamesTheDropIn(t *testing.T) {
	path := fakeSocket(t)
	sim := newSim(goodWorld())
	startFake(t, path, func(id protocol.ManagementID, seq uint16) [][]byte { return sim.respond(t, id, seq) })
	dev := filepath.Join(t.TempDir(), "ptp9")
	c := testChecker(t, path, func(c *Config) { c.PHC = dev }, nil)
	var s Status
	for range 2 {
		var err error
		if s, err = c.Poll(context.Background()); err != nil {
			t.Fatalf("Poll: %v", err)
		}
	}
	if s.State != StateUnsynced || !strings.Contains(s.PHCErr, dev) || !strings.Contains(s.PHCErr, "deploy/systemd/lds-phc.conf") {
		t.Fatalf("state %s, PHCErr %q: want unsynced, naming %s and the drop-in", s.State, s.PHCErr, dev)
	}
}
