package truth

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/lds-net/lds/internal/capture"
)

func TestKeyRoundTrip(t *testing.T) {
	tests := []struct {
		src, dst string
		wantErr  bool
		wantSrc  string
	}{
		{"10.0.0.1", "192.0.2.1", false, "10.0.0.1"},
		{"2001:db8::1", "2001:db8::2", false, "2001:db8::1"},
		{"::ffff:10.0.0.1", "192.0.2.1", false, "10.0.0.1"}, // mapped: unmapped
		{"10.0.0.1", "2001:db8::2", true, ""},
		{"10.0.0.300", "192.0.2.1", true, ""},
		{"10.0.0.1", "", true, ""},
	}
	for _, tc := range tests {
		r := Record{Interval: 3, Src: tc.src, Dst: tc.dst, SPort: 1, DPort: 2, Proto: 17}
		k, err := r.Key()
		if (err != nil) != tc.wantErr {
			t.Fatalf("%s -> %s: error %v, want error %v", tc.src, tc.dst, err, tc.wantErr)
		}
		if err != nil {
			continue
		}
		var back Record
		back.SetKey(k)
		if back.Src != tc.wantSrc || back.SPort != 1 || back.DPort != 2 || back.Proto != 17 {
			t.Fatalf("%s -> %s: key %v renders as %+v", tc.src, tc.dst, k, back)
		}
		want, _ := capture.FlowKeyFromAddrs(netip.MustParseAddr(tc.wantSrc), netip.MustParseAddr(tc.dst), 17, 1, 2)
		if k != want {
			t.Fatalf("%s -> %s: key %v, want %v", tc.src, tc.dst, k, want)
		}
	}
}

func TestRead(t *testing.T) {
	d := 5.0
	good := Record{Interval: 1, StartNS: 1e9, Src: "10.0.0.1", Dst: "10.0.0.2", Sent: 3, Received: 2, Lost: 1, DelayNS: &d}
	line, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := Read(bytes.NewReader(append(line, "\n\n"...)))
	if err != nil || len(recs) != 1 || recs[0].Sent != 3 || *recs[0].DelayNS != 5 {
		t.Fatalf("read %+v, %v", recs, err)
	}
	bad := strings.Replace(string(line), `"lost":1`, `"lost":2`, 1)
	if _, err := Read(strings.NewReader(string(line) + "\n" + bad + "\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("inconsistent counts: error %v, want one naming line 2", err)
	}
}

func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"interval":1,"start_ns":1,"src":"10.0.0.1","dst":"10.0.0.2","sport":1,"dport":2,"proto":17,"sent":3,"received":2,"lost":1,"delay_ns":5,"stddev_ns":1}` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := Read(bytes.NewReader(b))
		if err != nil {
			return
		}
		for i := range recs {
			r := &recs[i]
			if r.Lost != r.Sent-r.Received || r.Received > r.Sent || r.Received < 0 {
				t.Fatalf("inconsistent record accepted: %+v", r)
			}
			if k, err := r.Key(); err == nil {
				var back Record
				back.SetKey(k)
				if k2, err := back.Key(); err != nil || k2 != k {
					t.Fatalf("key %v renders as %+v, parses back as %v, %v", k, back, k2, err)
				}
			}
		}
	})
}
