package api

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/results"
)

// bigStore holds one interval of n flows with random packets, loss and
// delays (some without a delay).
func bigStore(n int) (*Store, []results.FlowRecord) {
	r := rand.New(rand.NewPCG(3, 4))
	flows := make([]results.FlowRecord, n)
	for i := range flows {
		var d *float64
		if r.IntN(5) > 0 {
			d = f(float64(r.IntN(50)) * 1000)
		}
		flows[i] = rec("a", 100, fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), "192.0.2.7", 6,
			float64(r.IntN(100)), float64(r.IntN(3)), d)
	}
	s := NewStore(2)
	s.Add(&results.Interval{Sender: "a", Interval: 100, StartNS: 100e9, Outcome: results.OutcomeMatched, Flows: slices.Clone(flows)})
	return s, flows
}

// TestFlowsLimitSelectsTheFirst: with limit below the number of flows,
// each order answers exactly the first limit flows of a full sort (many
// ties: the flow key breaks them), and total counts them all.
func TestFlowsLimitSelectsTheFirst(t *testing.T) {
	s, flows := bigStore(5000)
	h := s.Handler()
	for sortBy, less := range flowOrders() {
		for _, limit := range []int{1, 37, 4999, 5000} {
			code, body := do(t, h, http.MethodGet, fmt.Sprintf("/api/v1/flows?sort=%s&limit=%d", sortBy, limit))
			if code != http.StatusOK {
				t.Fatalf("%s limit %d: %d %s", sortBy, limit, code, body)
			}
			var ans FlowsAnswer
			if err := json.Unmarshal(body, &ans); err != nil {
				t.Fatalf("%s limit %d: %v", sortBy, limit, err)
			}
			all := make([]*results.FlowRecord, len(flows))
			for i := range flows {
				all[i] = &flows[i]
			}
			slices.SortFunc(all, less)
			if ans.Total != len(flows) || len(ans.Flows) != limit {
				t.Fatalf("%s limit %d: total %d, %d flows", sortBy, limit, ans.Total, len(ans.Flows))
			}
			for i := range ans.Flows {
				if less(ans.Flows[i], all[i]) != 0 {
					t.Fatalf("%s limit %d: flow %d is %+v, want %+v", sortBy, limit, i, ans.Flows[i], all[i])
				}
			}
		}
	}
}

// TestFlowsMemoryFollowsLimit: answering limit=10 over 200k stored flows
// allocates a small fraction of what the stored flows take (the old
// answer sorted and buffered all of them).
func TestFlowsMemoryFollowsLimit(t *testing.T) {
	s, _ := bigStore(200_000)
	h := s.Handler()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/api/v1/flows?limit=10&sort=delay", nil))
	runtime.ReadMemStats(&m1)
	if rr.Code != http.StatusOK || !strings.Contains(rr.Body.String(), `"total":200000`) {
		t.Fatalf("answer %d %.200s", rr.Code, rr.Body.String())
	}
	got := m1.TotalAlloc - m0.TotalAlloc
	t.Logf("limit=10 over 200000 flows: %d bytes allocated", got)
	if got > 256<<10 {
		t.Errorf("allocated %d bytes for 10 flows", got)
	}
}

// blockingWriter blocks the handler in Write until release is closed.
type blockingWriter struct {
	httptest.ResponseRecorder
	writing chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.writing) })
	<-b.release
	return len(p), nil
}

// TestWritingCap: while MaxWriting large answers are being written (their
// clients do not read), one more large request gets 503 with Retry-After,
// small ones are still answered; once the large ones finish, a large one
// is served again.
func TestWritingCap(t *testing.T) {
	s, _ := bigStore(2 * SmallAnswer)
	h := s.Handler()
	large := fmt.Sprintf("/api/v1/flows?limit=%d", SmallAnswer+1)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range MaxWriting {
		w := &blockingWriter{ResponseRecorder: *httptest.NewRecorder(), writing: make(chan struct{}), release: release}
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, large, nil))
		}()
		<-w.writing
	}
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, large, nil))
	if rr.Code != http.StatusServiceUnavailable || rr.Header().Get("Retry-After") == "" {
		t.Errorf("large request beyond the cap: %d (Retry-After %q), want 503 with Retry-After", rr.Code, rr.Header().Get("Retry-After"))
	}
	for _, small := range []string{"/api/v1/flows", fmt.Sprintf("/api/v1/flows?limit=%d", SmallAnswer), "/api/v1/links", "/api/v1/intervals"} {
		if code, body := do(t, h, http.MethodGet, small); code != http.StatusOK {
			t.Errorf("%s while %d large answers are held: %d %.200s", small, MaxWriting, code, body)
		}
	}
	close(release)
	wg.Wait()
	if code, _ := do(t, h, http.MethodGet, large); code != http.StatusOK {
		t.Errorf("after the others finished: %d", code)
	}
}

// TestSlowReadersDoNotStall reproduces the stall on loopback: clients ask
// for a 100k-flow answer (tens of MB, more than the sockets buffer) and
// never read it. While they hold their answers, other clients' requests to
// every endpoint are answered 200, not 503; the held answers end once
// their clients go.
func TestSlowReadersDoNotStall(t *testing.T) {
	s, _ := bigStore(MaxLimit)
	// The held answers must outlive the test's own pace (the race
	// detector slows it many times): no write deadline here, the next
	// test has its own.
	s.SetWriteIdle(time.Hour)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, slow := range []int{MaxConcurrent, 2 * MaxConcurrent, 3*MaxConcurrent + 1} {
		t.Run(fmt.Sprint(slow, " slow readers"), func(t *testing.T) {
			var conns []net.Conn
			for range slow {
				c, err := net.Dial("tcp", srv.Listener.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetReadBuffer(4096) // as little as the kernel allows: the server blocks early
				}
				fmt.Fprintf(c, "GET /api/v1/flows?limit=%d&sort=delay HTTP/1.1\r\nHost: x\r\n\r\n", MaxLimit)
				// The answer has begun (its status line came): the
				// request is past computing, in its write; then nothing
				// more is read.
				line, err := bufio.NewReaderSize(c, 16).ReadString('\n')
				if err != nil || !strings.Contains(line, "200") {
					t.Fatalf("slow reader's status line %q: %v", line, err)
				}
				conns = append(conns, c)
			}
			if n := s.Writing(); n != slow {
				t.Fatalf("%d answers being written, want the %d slow readers'", n, slow)
			}
			cl := &http.Client{Timeout: 20 * time.Second}
			for _, path := range []string{"/api/v1/flows?limit=10", "/api/v1/links", "/api/v1/intervals", "/api/v1/flows?limit=5000&sort=loss"} {
				for range 3 {
					resp, err := cl.Get(srv.URL + path)
					if err != nil {
						t.Fatalf("%s while %d slow readers hold answers: %v", path, slow, err)
					}
					body, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err != nil || resp.StatusCode != http.StatusOK || !json.Valid(body) {
						t.Fatalf("%s while %d slow readers hold answers: %d %.200s (%v)", path, slow, resp.StatusCode, body, err)
					}
				}
			}
			if n := s.Writing(); n != slow {
				t.Errorf("%d answers being written after the others were served, want the %d slow readers' still held", n, slow)
			}
			for _, c := range conns {
				c.Close()
			}
			waitWriting(t, s, 0, time.Minute)
		})
	}
}

// waitWriting waits (bounded) until n answers are being written.
func waitWriting(t *testing.T, s *Store, n int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for s.Writing() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d answers being written after %v, want %d", s.Writing(), d, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWriteDeadlineEndsHeldAnswers: an answer whose client takes nothing
// for the write deadline is abandoned: its writing slot frees without the
// client doing anything.
func TestWriteDeadlineEndsHeldAnswers(t *testing.T) {
	s, _ := bigStore(MaxLimit)
	s.SetWriteIdle(200 * time.Millisecond)
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /api/v1/flows?limit=%d HTTP/1.1\r\nHost: x\r\n\r\n", MaxLimit)
	if line, err := bufio.NewReaderSize(c, 16).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
		t.Fatalf("status line %q: %v", line, err)
	}
	// The client reads nothing more and stays connected.
	waitWriting(t, s, 0, time.Minute)
}
