package capture

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/match"
	"gopkg.in/yaml.v3"
)

func TestValidateNamesKeys(t *testing.T) {
	cases := []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Identity.Seed = "" }, "capture.identity.seed"},
		{func(c *Config) { c.Identity.PayloadBytes = -1 }, "capture.identity.payload_bytes"},
		{func(c *Config) { c.Identity.PayloadBytes = MaxPayloadBytes + 1 }, "capture.identity.payload_bytes"},
		{func(c *Config) { c.Identity.FlowKey.SrcPrefixV4 = 33 }, "capture.identity.flow_key.src_prefix_v4"},
		{func(c *Config) { c.Identity.FlowKey.DstPrefixV6 = 129 }, "capture.identity.flow_key.dst_prefix_v6"},
		{func(c *Config) { c.Select = []match.Rule{{Src: []string{"nope"}}} }, "capture.select[0].src"},
		{func(c *Config) { c.Weights = []WeightRule{{Weight: 0}} }, "capture.weights[0].weight"},
		{func(c *Config) { c.Classes = []match.Rule{{}} }, "capture.classes[0].name"},
		{func(c *Config) { c.Classes = []match.Rule{{Name: "a"}, {Name: "a"}} }, "capture.classes[1].name"},
		{func(c *Config) { c.Source.Kind = "tap" }, "capture.source.kind"},
		{func(c *Config) { c.Source.File = "" }, "capture.source.file"},
		{func(c *Config) {
			c.Source = SourceConfig{Kind: "afpacket", Interface: "x", Workers: 0, BlockSize: 1 << 20, NumBlocks: 2, BlockTimeout: 1e7, PollTimeout: 1e8}
		}, "capture.source.workers"},
		{func(c *Config) {
			c.Source = SourceConfig{Kind: "afpacket", Workers: 1, BlockSize: 1000, NumBlocks: 2, BlockTimeout: 1e7, PollTimeout: 1e8}
		}, "capture.source.block_size"},
		{func(c *Config) {
			c.Source = SourceConfig{Kind: "afpacket", Workers: 1, BlockSize: 1 << 20, NumBlocks: 2, BlockTimeout: 1e7, PollTimeout: 1e8}
		}, "capture.source.interface"},
		{func(c *Config) { c.Source.TimestampSource = "adapter" }, "capture.source.timestamp_source"},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		cfg.Source.File = "x.pcap"
		c.mut(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want error naming %s, got %v", c.want, err)
		}
	}
	cfg := DefaultConfig()
	cfg.Source.File = "x.pcap"
	if err := cfg.Validate(); err != nil {
		t.Errorf("defaults with a file: %v", err)
	}
}

func TestPcapSnaplenRefused(t *testing.T) {
	if !pcapBuilt {
		t.Skip("pcap kind needs -tags pcap; snap length checks for files are in TestFileErrors")
	}
	cfg := DefaultConfig()
	cfg.Source = DefaultConfig().Source
	cfg.Source.Kind, cfg.Source.Interface, cfg.Source.Snaplen = "pcap", "lo", 100
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "capture.source.snaplen") || !strings.Contains(err.Error(), "need at least 104") {
		t.Fatalf("snaplen 100 with ip_bytes 82: %v", err)
	}
	cfg.Source.Snaplen = 104 // the advice
	if err := cfg.Validate(); err != nil {
		t.Errorf("snaplen 104: %v", err)
	}
}

// TestSourceSnaplen: an afpacket snap length is 0 (22 + ip_bytes, which
// follows ip_bytes) or one that holds two VLAN tags + ip_bytes, up to
// MaxSnaplen; anything else is refused naming the key and the bounds.
func TestSourceSnaplen(t *testing.T) {
	for _, tc := range []struct {
		snaplen, ipBytes int
		want             int // SnapLen, or 0 for an error
	}{
		{0, 82, 104}, {0, 114, 136}, {104, 82, 104}, {65535, 82, 65535}, {MaxSnaplen, 82, MaxSnaplen},
		{103, 82, 0}, {104, 114, 0}, {MaxSnaplen + 1, 82, 0}, {-1, 82, 0},
	} {
		cfg := DefaultConfig()
		cfg.Identity.IPBytes = tc.ipBytes
		cfg.Source.Kind, cfg.Source.Interface, cfg.Source.Snaplen = "afpacket", "eth1", tc.snaplen
		err := cfg.Validate()
		switch {
		case tc.want == 0 && (err == nil || !strings.Contains(err.Error(), "capture.source.snaplen") || !strings.Contains(err.Error(), fmt.Sprintf("need at least %d", 22+tc.ipBytes))):
			t.Errorf("snaplen %d, ip_bytes %d: %v, want the bounds", tc.snaplen, tc.ipBytes, err)
		case tc.want != 0 && err != nil:
			t.Errorf("snaplen %d, ip_bytes %d: %v", tc.snaplen, tc.ipBytes, err)
		case tc.want != 0 && cfg.Source.SnapLen(cfg.Identity) != tc.want:
			t.Errorf("snaplen %d, ip_bytes %d: SnapLen %d, want %d", tc.snaplen, tc.ipBytes, cfg.Source.SnapLen(cfg.Identity), tc.want)
		case tc.want != 0 && cfg.liveSource().Snaplen != tc.want:
			t.Errorf("snaplen %d, ip_bytes %d: the source opens with %d, want %d", tc.snaplen, tc.ipBytes, cfg.liveSource().Snaplen, tc.want)
		}
	}
}

func TestYAML(t *testing.T) {
	doc := `
identity:
  seed: s3cret
  payload_bytes: 16
  flow_key: {src_prefix_v4: 24}
select:
  - {dst: ["192.0.2.0/24"], proto: [6]}
weights:
  - {dport: ["443"], weight: 4}
classes:
  - {name: voice, proto: [17], dport: ["5060-5090"]}
source: {kind: file, file: a.pcap}
`
	cfg := DefaultConfig()
	if err := yaml.Unmarshal([]byte(doc), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Identity.PayloadBytes != 16 || cfg.Identity.FlowKey.SrcPrefixV4 != 24 || cfg.Identity.FlowKey.DstPrefixV4 != 32 ||
		!cfg.Identity.FlowKey.Ports || cfg.Weights[0].Weight != 4 || cfg.Weights[0].DPort[0] != "443" || cfg.Classes[0].Name != "voice" {
		t.Errorf("decoded %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Error(err)
	}
	for _, bad := range []struct{ doc, want string }{
		{"classes:\n  - {name: ef, dscp: 46}\n", "capture.classes[0].dscp"},
		{"weights:\n  - {ttl: 64, weight: 2}\n", "capture.weights[0].ttl"},
		{"select:\n  - {vlan: 100}\n", "capture.select[0].vlan"},
		{"identity: {payload_bytez: 3}\n", "payload_bytez"},
	} {
		c := DefaultConfig()
		err := yaml.Unmarshal([]byte(bad.doc), &c)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: want error naming %s, got %v", bad.doc, bad.want, err)
		}
		if bad.want == "capture.classes[0].dscp" && !strings.Contains(err.Error(), "remarked") {
			t.Errorf("DSCP refusal does not say why: %v", err)
		}
	}
}

func TestFingerprint(t *testing.T) {
	base := DefaultConfig()
	fp := base.FingerprintFields()
	if !maps.Equal(fp, DefaultConfig().FingerprintFields()) {
		t.Fatal("fingerprint not deterministic")
	}
	for k, v := range fp {
		if strings.Contains(v, base.Identity.Seed) {
			t.Errorf("%s: the seed travels in clear in the fingerprint", k)
		}
	}
	muts := map[string]func(*Config){
		"capture.identity.seed":                   func(c *Config) { c.Identity.Seed = "other" },
		"capture.identity.payload_bytes":          func(c *Config) { c.Identity.PayloadBytes = 31 },
		"capture.identity.flow_key.dst_prefix_v6": func(c *Config) { c.Identity.FlowKey.DstPrefixV6 = 64 },
		"capture.identity.flow_key.ports":         func(c *Config) { c.Identity.FlowKey.Ports = false },
	}
	for key, m := range muts {
		c := DefaultConfig()
		m(&c)
		a, b := fp, c.FingerprintFields()
		if maps.Equal(a, b) {
			t.Errorf("%s does not change the fingerprint", key)
		}
		for k := range a {
			if (a[k] != b[k]) != (k == key) {
				t.Errorf("changing %s: field %s %q vs %q", key, k, a[k], b[k])
			}
		}
	}
	// Selection and sources do not change hashes: not in the fingerprint.
	c := DefaultConfig()
	c.Source.Kind = "afpacket"
	c.Select = []match.Rule{{Proto: []int{6}}}
	if !maps.Equal(c.FingerprintFields(), fp) {
		t.Error("source or selection changed the fingerprint")
	}
}

func TestFlowKeyBinary(t *testing.T) {
	a := netip.MustParseAddr
	for _, k := range []FlowKey{
		mustKey(t, a("192.0.2.1"), a("198.51.100.2"), 6, 1, 2),
		mustKey(t, a("2001:db8::1"), a("::1"), 58, 0x8000, 7),
		mustKey(t, a("::ffff:10.0.0.1"), a("10.0.0.2"), 17, 53, 53),
	} {
		b := k.AppendBinary(nil)
		want := FlowKeyBinaryLenV4
		if k.V6 {
			want = FlowKeyBinaryLenV6
		}
		if len(b) != want {
			t.Errorf("%v: %d bytes, want %d", k, len(b), want)
		}
		back, err := FlowKeyFromBinary(b)
		if err != nil || back != k {
			t.Errorf("%v: round trip gave %v, %v", k, back, err)
		}
	}
	k := mustKey(t, a("10.0.0.1"), a("10.0.0.2"), 17, 53, 5353)
	if k.String() != "17 10.0.0.1:53 > 10.0.0.2:5353" || k.SrcAddr() != a("10.0.0.1") || !k.DstAddr().Is4() {
		t.Errorf("String %q", k.String())
	}
	for _, b := range [][]byte{nil, {4, 6, 0, 0, 0, 0, 1}, {5, 6, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8}, append([]byte{6, 6, 0, 0, 0, 0}, make([]byte, 31)...)} {
		if _, err := FlowKeyFromBinary(b); err == nil {
			t.Errorf("%x decoded", b)
		}
	}
	if _, err := FlowKeyFromAddrs(a("10.0.0.1"), a("::1"), 6, 0, 0); err == nil {
		t.Error("mixed families accepted")
	}
}

func mustKey(t *testing.T, s, d netip.Addr, p uint8, sp, dp uint16) FlowKey {
	k, err := FlowKeyFromAddrs(s, d, p, sp, dp)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestDefaultRingHold: the default ring holds at least 2 s of traffic
// however low the packet rate (the kernel retires a block every
// block_timeout), and its bytes bound it at high rates.
func TestDefaultRingHold(t *testing.T) {
	d := DefaultConfig().Source
	if h := RingHold(d.BlockSize, d.NumBlocks, d.BlockTimeout, 0); h < 2*time.Second {
		t.Errorf("the default ring (%d × %d B, block_timeout %v) holds %v at low rates, want >= 2s", d.NumBlocks, d.BlockSize, d.BlockTimeout, h)
	}
	tests := []struct {
		bs, nb int
		tov    time.Duration
		rate   float64 // ring bytes a second
		want   time.Duration
	}{
		{256 << 10, 256, 10 * time.Millisecond, 0, 2560 * time.Millisecond},
		{1 << 20, 64, 10 * time.Millisecond, 0, 640 * time.Millisecond},                // the former default
		{1 << 20, 4, 10 * time.Millisecond, 0, 320 * time.Millisecond},                 // split into 128 blocks of 32 KiB
		{256 << 10, 256, 50 * time.Millisecond, 0, 12800 * time.Millisecond},           // the default
		{256 << 10, 256, 10 * time.Millisecond, 64 << 20, 2560 * time.Millisecond / 3}, // bytes bound it: 2.56 blocks a period, 3 handed over
		{256 << 10, 256, 10 * time.Millisecond, 1 << 20, 2560 * time.Millisecond},      // 0.04 blocks a period: one handed over
		{256 << 10, 256, 50 * time.Millisecond, 30000 * 192, 6400 * time.Millisecond},  // 1.1 blocks a period: a full one and a nearly empty one
		{256 << 10, 256, 50 * time.Millisecond, 30000 * 1600, 1280 * time.Millisecond}, // 9.2 blocks a period: 10
	}
	for _, tc := range tests {
		if got := RingHold(tc.bs, tc.nb, tc.tov, tc.rate); got != tc.want {
			t.Errorf("RingHold(%d, %d, %v, %v) = %v, want %v", tc.bs, tc.nb, tc.tov, tc.rate, got, tc.want)
		}
	}
	// With the default snap length a full-size frame takes 192 ring bytes
	// instead of 1600: the default ring holds 2 s of them up to ~163 kpps
	// (12.8 s up to ~27 kpps), whole ones only up to ~19 kpps.
	snap := d.SnapLen(DefaultConfig().Identity)
	for _, tc := range []struct {
		snap int
		pps  float64
		want bool // holds >= 2 s
	}{
		{snap, 136e3, true}, {snap, 163e3, true}, {snap, 164e3, false},
		{65535, 19e3, true}, {65535, 20e3, false}, {65535, 30e3, false},
	} {
		h := RingHold(d.BlockSize, d.NumBlocks, d.BlockTimeout, tc.pps*float64(RingFrameBytes(1514, tc.snap)))
		if (h >= 2*time.Second) != tc.want {
			t.Errorf("default ring, snap length %d, %.0f frames/s of 1514 bytes: holds %v, want >= 2s %v", tc.snap, tc.pps, h, tc.want)
		}
	}
}

// TestRingFrameBytes: the ring slot of a frame (the layout
// TestLiveAFPacketRingSlots reads back from the kernel's ring).
func TestRingFrameBytes(t *testing.T) {
	for _, tc := range []struct{ frame, snap, want int }{
		{1514, 0, 1600}, {1514, 65535, 1600}, {1514, 104, 192}, {60, 104, 144}, {104, 104, 192}, {98, 104, 184},
	} {
		if got := RingFrameBytes(tc.frame, tc.snap); got != tc.want {
			t.Errorf("RingFrameBytes(%d, %d) = %d, want %d", tc.frame, tc.snap, got, tc.want)
		}
	}
}
