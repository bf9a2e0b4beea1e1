package config

import (
	"strings"
	"testing"
)

// TestMemoryBoundDefaults holds the MemoryMax= that docs/PERFORMANCE.md
// ("Memory") gives the systemd units to the bound of the default
// configuration at 1 Mpps, and checks that the bound follows the keys it
// names.
func TestMemoryBoundDefaults(t *testing.T) {
	in := MemoryInput{PPS: 1e6}
	rc, sc := DefaultReceiver(), DefaultSender()
	rb, sb := rc.MemoryBound(in), sc.MemoryBound(in)
	if rb.Peak > 24<<30 {
		t.Errorf("receiver bound %d MiB at the defaults passes the documented MemoryMax=24G", rb.Peak>>20)
	}
	if sb.Peak > 4<<30 {
		t.Errorf("sender bound %d MiB at the defaults passes the documented MemoryMax=4G", sb.Peak>>20)
	}
	for _, b := range []MemoryBound{rb, sb} {
		var sum int64
		for _, term := range b.Terms {
			if term.N < 0 || term.Each < 0 {
				t.Errorf("negative term %+v", term)
			}
			sum += term.Bytes()
		}
		if sum != b.Live || b.Peak != RuntimeBaseBytes+2*b.Live {
			t.Errorf("live %d, peak %d: not the sum %d of the terms and base + 2 × live", b.Live, b.Peak, sum)
		}
	}
	// Every key the bound names moves it.
	for _, tc := range []struct {
		key string
		set func(*Receiver)
	}{
		{"sketch.max_flows", func(c *Receiver) { c.Sketch.MaxFlows *= 2 }},
		{"receiver.max_pending", func(c *Receiver) { c.Receiver.MaxPending *= 2 }},
		{"receiver.lateness", func(c *Receiver) { c.Receiver.Lateness *= 2 }},
		{"receiver.sealed_queue", func(c *Receiver) { c.Receiver.SealedQueue *= 2 }},
		{"receiver.api_max_records", func(c *Receiver) { c.Receiver.APIMaxRecords *= 2 }},
		{"receiver.max_sketch_bytes", func(c *Receiver) { c.Receiver.MaxSketchBytes *= 2 }},
		{"capture.source.workers", func(c *Receiver) { c.Capture.Source.Workers = 2 }},
		{"sketch.columns", func(c *Receiver) { c.Sketch.Columns *= 2 }},
		{"receiver.senders", func(c *Receiver) { c.Receiver.Senders = []SenderEntry{{ID: "a"}, {ID: "b"}} }},
	} {
		c := DefaultReceiver()
		tc.set(&c)
		if got := c.MemoryBound(in).Live; got <= rb.Live {
			t.Errorf("%s raised: live bound %d, not above the default's %d", tc.key, got, rb.Live)
		}
	}
	var out strings.Builder
	WriteMemoryBound(&out, "lds-receiver", rb)
	if !strings.Contains(out.String(), "peak resident") || strings.Count(out.String(), "\n") != len(rb.Terms)+3 {
		t.Errorf("table:\n%s", out.String())
	}
}

// TestResultsAndMemoryKeysNamed: the results file's and the memory keys'
// bad values are refused with the key named; their limits are accepted.
func TestResultsAndMemoryKeysNamed(t *testing.T) {
	for _, c := range []struct {
		yaml, want string // want "" = valid
	}{
		{"receiver:\n  results_max_bytes: 1000\n", "receiver.results_max_bytes"},
		{"receiver:\n  results_max_bytes: -1\n", "receiver.results_max_bytes"},
		{"receiver:\n  results_max_bytes: 0\n", ""},
		{"receiver:\n  results_max_bytes: 65536\n", ""},
		{"receiver:\n  results_max_age: 30s\n", "receiver.results_max_age"},
		{"receiver:\n  results_max_age: 0s\n", ""},
		{"receiver:\n  results_keep: -1\n", "receiver.results_keep"},
		{"receiver:\n  results_keep: 0\n", ""},
		{"receiver:\n  api_max_records: 0\n", "receiver.api_max_records"},
		{"receiver:\n  api_max_records: 1\n", ""},
		{"receiver:\n  sealed_queue: 0\n", "receiver.sealed_queue"},
		{"receiver:\n  sealed_queue: 1\n", ""},
		{"receiver:\n  results_fsync: false\n", ""},
	} {
		r := DefaultReceiver()
		r.Receiver.TLS.Plaintext = true
		r.Capture.Source.Interface = "eth1"
		r.Sketch.Seed = "5f0c6e1a9b2d4c3e8f7a6b5c4d3e2f10" // not the example seed, which a daemon may refuse
		err := Decode(strings.NewReader(c.yaml), &r, "test")
		if err == nil {
			err = r.Validate()
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: refused: %v", c.yaml, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: error %v, want one naming %q", c.yaml, err, c.want)
		}
	}
}
