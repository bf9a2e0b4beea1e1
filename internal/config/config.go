// Package config loads the daemons' YAML files (docs/config.md). Each internal
// package owns the struct of its own section, with defaults and Validate();
// this package composes them, fills defaults, refuses unknown keys, and
// computes the fingerprint that the sender and the receiver must share.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/export"
	"github.com/lds-net/lds/internal/match"
	"github.com/lds-net/lds/internal/metrics"
	"github.com/lds-net/lds/internal/ptp"
	"github.com/lds-net/lds/internal/sample"
	"github.com/lds-net/lds/internal/sketch"
	"github.com/lds-net/lds/internal/spike"
)

// HashVersion names the whole derivation of cells from packet bytes:
// capture's identity layout (the bytes each hash covers, docs/capture.md)
// and sketch's derivation of cells, signs and sampling from the two hashes
// (docs/sketch.md). It is the fingerprint's one hash version
// ("hash_version"): bump it on any change to either, so that two ends
// built from different derivations never pair.
const HashVersion = "2"

// Sketch is the `sketch:` section (stable keys of docs/config.md plus additions).
type Sketch struct {
	Rows      int       `yaml:"rows"`
	Columns   int       `yaml:"columns"`
	VLDA      int       `yaml:"vlda"`
	Sampling  []float64 `yaml:"sampling"`
	Alpha     float64   `yaml:"alpha"`
	Seed      string    `yaml:"seed"`
	Estimator string    `yaml:"estimator"`
	Bytes     bool      `yaml:"bytes"`     // keep a byte counter per cell
	MaxFlows  int       `yaml:"max_flows"` // receiver: cap of the per-interval candidate flow table
	Heavy     int       `yaml:"heavy"`     // sender: heaviest flow keys sent with each End
}

// LDA is the `lda:` section: the link-level aggregator per traffic class.
type LDA struct {
	Banks int `yaml:"banks"`
	Cells int `yaml:"cells"` // per bank
}

// Log is the `log:` section.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text or json
}

// Common holds what both daemons read; the fingerprinted part must agree.
type Common struct {
	Interval time.Duration  `yaml:"interval"`
	MaxDelay time.Duration  `yaml:"max_delay"`
	Guard    time.Duration  `yaml:"guard"` // clock-offset margin at interval boundaries
	Sketch   Sketch         `yaml:"sketch"`
	LDA      LDA            `yaml:"lda"`
	Capture  capture.Config `yaml:"capture"`
	PTP      ptp.Config     `yaml:"ptp"`
	Metrics  metrics.Config `yaml:"metrics"`
	Log      Log            `yaml:"log"`
	Sample   sample.Config  `yaml:"sample"` // consistent packet samples: per-flow quantiles (docs/sampling.md)
	Lost     Lost           `yaml:"lost"`   // the lost-packet table: exact loss and the list of lost packets (lost.go)
}

// TLSClient is the sender's side of mTLS.
type TLSClient struct {
	Cert       string `yaml:"cert"`
	Key        string `yaml:"key"`
	CA         string `yaml:"ca"`
	ServerName string `yaml:"server_name"`
	// Plaintext disables TLS; allowed only towards a loopback receiver.
	Plaintext bool `yaml:"plaintext"`
}

// SenderSection is the `sender:` section.
type SenderSection struct {
	ID           string        `yaml:"id"`
	Receiver     string        `yaml:"receiver"` // host:port of lds-receiver
	TLS          TLSClient     `yaml:"tls"`
	ResendBuffer int           `yaml:"resend_buffer"` // finished intervals kept until acknowledged
	BackoffMin   time.Duration `yaml:"backoff_min"`
	BackoffMax   time.Duration `yaml:"backoff_max"`
	Keepalive    time.Duration `yaml:"keepalive"`
	RPCTimeout   time.Duration `yaml:"rpc_timeout"` // deadline for the handshake and for each interval's acknowledgement
	ChunkBytes   int           `yaml:"chunk_bytes"`
}

// TLSServer is the receiver's side of mTLS.
type TLSServer struct {
	Cert     string `yaml:"cert"`
	Key      string `yaml:"key"`
	ClientCA string `yaml:"client_ca"`
	// Plaintext disables TLS; allowed only when listening on loopback.
	Plaintext bool `yaml:"plaintext"`
}

// SenderEntry is one upstream tap the receiver accepts.
type SenderEntry struct {
	ID     string       `yaml:"id"`
	Select []match.Rule `yaml:"select"` // receiver-side traffic that this sender's tap also sees; empty = all measured traffic
}

// ReceiverSection is the `receiver:` section.
type ReceiverSection struct {
	Listen          string        `yaml:"listen"`
	TLS             TLSServer     `yaml:"tls"`
	Senders         []SenderEntry `yaml:"senders"`
	Lateness        time.Duration `yaml:"lateness"` // wait this long for the other side of an interval
	Keep            int           `yaml:"keep"`     // intervals of results kept for the API
	ResultsFile     string        `yaml:"results_file"`
	LostFile        string        `yaml:"lost_file"`         // JSON Lines of lost packets (docs/results.md); empty: none
	ResultsMaxBytes int64         `yaml:"results_max_bytes"` // rotate the results file before it passes this size; 0 = never
	ResultsMaxAge   time.Duration `yaml:"results_max_age"`   // rotate it once it is this old; 0 = never
	ResultsKeep     int           `yaml:"results_keep"`      // rotated files kept (results_file.1 .. .N)
	ResultsFsync    bool          `yaml:"results_fsync"`     // fsync at the end of every interval
	APIMaxRecords   int           `yaml:"api_max_records"`   // flow records the API store keeps in total, oldest intervals evicted first
	SealedQueue     int           `yaml:"sealed_queue"`      // sealed intervals queued per sender between capture and matching
	MaxFrameBytes   int           `yaml:"max_frame_bytes"`
	MaxSketchBytes  int           `yaml:"max_sketch_bytes"`
	MaxPending      int           `yaml:"max_pending"` // intervals waiting for a sender before the oldest is given up
	// MaxIntervalSkew: a sender's interval starting further than this from
	// the receiver's clock is refused and counted (live daemons only).
	MaxIntervalSkew time.Duration `yaml:"max_interval_skew"`
	MaxConnections  int           `yaml:"max_connections"` // authenticated sender connections open at once
}

// Sender is the whole lds-sender file.
type Sender struct {
	Common `yaml:",inline"`
	Sender SenderSection `yaml:"sender"`
}

// Receiver is the whole lds-receiver file.
type Receiver struct {
	Common   `yaml:",inline"`
	Receiver ReceiverSection `yaml:"receiver"`
	Spike    spike.Config    `yaml:"spike"`
	Export   export.Config   `yaml:"export"`
}

// DefaultCommon returns the defaults of docs/config.md.
func DefaultCommon() Common {
	sp := sketch.DefaultParams()
	lp := sketch.DefaultLDAParams()
	cc := capture.DefaultConfig()
	cc.Identity.Seed = "" // the seed is sketch.seed; CaptureConfig fills it in
	cc.Source.Kind = "afpacket"
	return Common{
		Interval: time.Second,
		MaxDelay: time.Second,
		Guard:    time.Millisecond,
		Sketch: Sketch{
			Rows: sp.Rows, Columns: sp.Columns, VLDA: sp.VLDA, Sampling: append([]float64(nil), sp.Sampling...),
			Alpha: 0.1, Seed: "change-me", Estimator: "decode", MaxFlows: 1 << 20, Heavy: 1000,
		},
		LDA:     LDA{Banks: lp.Banks, Cells: lp.Cells},
		Capture: cc,
		PTP:     ptp.DefaultConfig(),
		Metrics: metrics.DefaultConfig(),
		Log:     Log{Level: "info", Format: "text"},
		Sample:  sample.DefaultConfig(),
		Lost:    DefaultLost(),
	}
}

// DefaultSender returns a sender configuration with every default set.
func DefaultSender() Sender {
	c := DefaultCommon()
	c.Metrics.Listen = ":9466"
	host, _ := os.Hostname()
	return Sender{Common: c, Sender: SenderSection{
		ID: host, Receiver: "127.0.0.1:7420", ResendBuffer: 32,
		BackoffMin: 200 * time.Millisecond, BackoffMax: 30 * time.Second,
		Keepalive: 30 * time.Second, RPCTimeout: 5 * time.Second, ChunkBytes: 256 << 10,
	}}
}

// DefaultReceiver returns a receiver configuration with every default set.
func DefaultReceiver() Receiver {
	return Receiver{Common: DefaultCommon(), Spike: spike.DefaultConfig(), Export: export.DefaultConfig(), Receiver: ReceiverSection{
		Listen: ":7420", Lateness: 10 * time.Second, Keep: 60,
		ResultsMaxBytes: 100 << 20, ResultsMaxAge: 24 * time.Hour, ResultsKeep: 7, ResultsFsync: true,
		APIMaxRecords: 2 << 20, SealedQueue: 2,
		MaxFrameBytes: 1 << 20, MaxSketchBytes: 256 << 20, MaxPending: 64,
		MaxIntervalSkew: 5 * time.Minute, MaxConnections: 64,
	}}
}

// LoadSender reads path (empty = defaults only) over the defaults and
// validates the result.
func LoadSender(path string) (Sender, error) {
	c, err := ReadSender(path)
	if err != nil {
		return c, err
	}
	return c, c.Validate()
}

// ReadSender reads path over the defaults without validating, so that
// command-line flags can still set keys before Validate.
func ReadSender(path string) (Sender, error) {
	c := DefaultSender()
	if err := load(path, &c); err != nil {
		return c, err
	}
	if c.Sender.ID == "" {
		c.Sender.ID, _ = os.Hostname() // documented default of sender.id
	}
	return c, nil
}

// LoadReceiver reads path (empty = defaults only) over the defaults and
// validates the result.
func LoadReceiver(path string) (Receiver, error) {
	c, err := ReadReceiver(path)
	if err != nil {
		return c, err
	}
	return c, c.Validate()
}

// ReadReceiver reads path over the defaults without validating (see
// ReadSender).
func ReadReceiver(path string) (Receiver, error) {
	c := DefaultReceiver()
	return c, load(path, &c)
}

func load(path string, into any) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return Decode(bytes.NewReader(b), into, path)
}

// Decode decodes YAML over the defaults already in into, refusing unknown
// keys: each is named by its dotted path and line, with the keys its
// section has.
func Decode(r io.Reader, into any, name string) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("config %s: %w", name, err)
	}
	if err := DecodeStrict(raw, into, docHint); err != nil {
		return fmt.Errorf("config %s: %w", name, err)
	}
	return nil
}

// DecodeStrict decodes YAML into into (over what it holds), refusing
// unknown keys by dotted path and line; docs says where the keys are
// documented and ends each error.
func DecodeStrict(raw []byte, into any, docs string) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return err
	}
	if errs := unknownKeys(&doc, reflect.TypeOf(into)); len(errs) > 0 {
		return fmt.Errorf("%w\n(%s)", errors.Join(errs...), docs)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(into); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w (%s)", err, docs)
	}
	return nil
}

// SketchParams converts the sketch section for internal/sketch.
func (c *Common) SketchParams() sketch.Params {
	return sketch.Params{Rows: c.Sketch.Rows, Columns: c.Sketch.Columns, VLDA: c.Sketch.VLDA,
		Sampling: c.Sketch.Sampling, Bytes: c.Sketch.Bytes}
}

// LDAParams converts the lda section for internal/sketch.
func (c *Common) LDAParams() sketch.LDAParams {
	return sketch.LDAParams{Banks: c.LDA.Banks, Cells: c.LDA.Cells}
}

// CaptureConfig returns the capture section with the shared seed filled in.
func (c *Common) CaptureConfig() capture.Config {
	cc := c.Capture
	cc.Identity.Seed = c.Sketch.Seed
	return cc
}

// Validate checks the common part; every error names its key.
func (c *Common) Validate() error {
	var errs []error
	if c.Interval < time.Millisecond {
		errs = append(errs, fmt.Errorf("interval: %v is too short (minimum 1ms)", c.Interval))
	}
	const maxSpan = 64 // interval.MaxClass (config stays a leaf)
	if c.MaxDelay <= 0 || c.Interval > 0 && (c.MaxDelay+2*c.Guard+c.Interval-1)/c.Interval > maxSpan {
		errs = append(errs, fmt.Errorf("max_delay: %v must be > 0 and, with 2 x guard, span at most %d intervals (%v each): raise interval or lower max_delay",
			c.MaxDelay, maxSpan, c.Interval))
	}
	if c.Guard < 0 || c.Guard > c.MaxDelay || 4*c.Guard >= c.Interval {
		errs = append(errs, fmt.Errorf("guard: %v must be between 0 and max_delay, and below a quarter of the interval", c.Guard))
	}
	if err := c.SketchParams().Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Sketch.Alpha < 0 || c.Sketch.Alpha > 10 {
		errs = append(errs, fmt.Errorf("sketch.alpha: %v outside [0, 10]", c.Sketch.Alpha))
	}
	if c.Sketch.Seed == "" {
		errs = append(errs, errors.New("sketch.seed: must not be empty (both ends must share one secret seed)"))
	}
	if c.Capture.Identity.Seed != "" && c.Capture.Identity.Seed != c.Sketch.Seed {
		errs = append(errs, errors.New("capture.identity.seed: do not set it; the seed is sketch.seed"))
	}
	switch c.Sketch.Estimator {
	case "decode", "paper":
	default:
		errs = append(errs, fmt.Errorf("sketch.estimator: %q is not one of decode, paper", c.Sketch.Estimator))
	}
	if c.Sketch.MaxFlows < 1 {
		errs = append(errs, errors.New("sketch.max_flows: must be >= 1"))
	}
	if c.Sketch.Heavy < 0 || c.Sketch.Heavy > 10000 {
		// The keys travel in the End frame, which must stay well under the
		// receiver's max_frame_bytes (1 MiB by default): 10000 IPv6 keys
		// take about 420 KB.
		errs = append(errs, errors.New("sketch.heavy: must be in [0, 10000]"))
	}
	if err := c.Lost.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.LDAParams().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.CaptureConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.PTP.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Metrics.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Sample.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level))
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log.format: %q is not one of text, json", c.Log.Format))
	}
	return errors.Join(errs...)
}

// ExampleSeeds are the seeds published with lds (the example configs, the
// demo and the evaluation scripts): public, so a daemon refuses them.
var exampleSeeds = []string{"change-me", "demo-seed", "paper-eval"}

// SecretSeed refuses a seed a daemon must not run with: empty, or one of
// the seeds published with lds. With a public seed anyone can compute
// every packet's cells and steer traffic into chosen ones.
func (c *Common) SecretSeed() error {
	if c.Sketch.Seed == "" {
		return errors.New("sketch.seed: not set; generate a secret with `openssl rand -hex 16` and set the same value at both ends")
	}
	if slices.Contains(exampleSeeds, c.Sketch.Seed) {
		return fmt.Errorf("sketch.seed: %q is an example published with lds, so anyone can steer packets into chosen cells; "+
			"generate a secret with `openssl rand -hex 16` and set the same value at both ends", c.Sketch.Seed)
	}
	return nil
}

// WeakSeed returns why a seed the daemons accept is still easy to guess
// (shorter than 16 characters, or fewer than 6 distinct ones), or "". The
// daemons warn at start and in --check-config; the example seeds and an
// empty one are refused by SecretSeed.
func WeakSeed(seed string) string {
	distinct := map[rune]bool{}
	for _, r := range seed {
		distinct[r] = true
	}
	switch n := len([]rune(seed)); {
	case n < 16:
		return fmt.Sprintf("%d characters: short enough to guess, after which anyone can steer packets into chosen cells", n)
	case len(distinct) < 6:
		return fmt.Sprintf("only %d distinct characters: easy to guess, after which anyone can steer packets into chosen cells", len(distinct))
	}
	return ""
}

// Validate checks the sender file for the daemon: ValidateReplay's checks
// and a secret seed.
func (c *Sender) Validate() error {
	return errors.Join(c.ValidateReplay(), c.SecretSeed())
}

// ValidateReplay checks the sender file as `ldsctl replay` uses it: a
// replay reads captured files on one host, so it accepts the example seeds.
func (c *Sender) ValidateReplay() error {
	errs := []error{c.Common.Validate()}
	s := c.Sender
	if s.ID == "" {
		errs = append(errs, errors.New("sender.id: must not be empty"))
	}
	if s.Receiver == "" {
		errs = append(errs, errors.New("sender.receiver: must be host:port of lds-receiver"))
	}
	if s.ResendBuffer < 1 {
		errs = append(errs, errors.New("sender.resend_buffer: must be >= 1"))
	}
	if s.BackoffMin <= 0 || s.BackoffMax < s.BackoffMin {
		errs = append(errs, errors.New("sender.backoff_min/backoff_max: need 0 < backoff_min <= backoff_max"))
	}
	if s.RPCTimeout <= 0 {
		errs = append(errs, errors.New("sender.rpc_timeout: must be > 0"))
	}
	if s.Keepalive < 10*time.Second {
		errs = append(errs, errors.New("sender.keepalive: must be >= 10s (the receiver refuses more frequent pings)"))
	}
	if s.ChunkBytes < 1024 || s.ChunkBytes > 2<<20 {
		errs = append(errs, errors.New("sender.chunk_bytes: must be in [1 KiB, 2 MiB] (gRPC's default limit is 4 MiB)"))
	}
	if !s.TLS.Plaintext && (s.TLS.Cert == "" || s.TLS.Key == "" || s.TLS.CA == "") {
		errs = append(errs, errors.New("sender.tls: cert, key and ca are required (mTLS); set sender.tls.plaintext: true only for a loopback receiver"))
	}
	return errors.Join(errs...)
}

// Validate checks the receiver file for the daemon: ValidateReplay's
// checks, a secret seed and the interval window (which a replay does not
// use).
func (c *Receiver) Validate() error {
	var skew error
	if minSkew := c.Receiver.Lateness + 2*c.Interval; c.Receiver.MaxIntervalSkew < minSkew {
		skew = fmt.Errorf("receiver.max_interval_skew: %v is below receiver.lateness + 2 x interval (%v): honest intervals would be refused", c.Receiver.MaxIntervalSkew, minSkew)
	}
	return errors.Join(c.ValidateReplay(), c.SecretSeed(), skew)
}

// ValidateReplay checks the receiver file as `ldsctl replay` uses it (the
// example seeds accepted: see Sender.ValidateReplay).
func (c *Receiver) ValidateReplay() error {
	errs := []error{c.Common.Validate(), c.Spike.Validate(), c.Export.Validate()}
	r := c.Receiver
	if r.Listen == "" {
		errs = append(errs, errors.New("receiver.listen: must be host:port"))
	}
	if !r.TLS.Plaintext && (r.TLS.Cert == "" || r.TLS.Key == "" || r.TLS.ClientCA == "") {
		errs = append(errs, errors.New("receiver.tls: cert, key and client_ca are required (mTLS); set receiver.tls.plaintext: true only when listening on loopback"))
	}
	if r.Lateness <= 0 {
		errs = append(errs, errors.New("receiver.lateness: must be > 0"))
	}
	if r.Keep < 1 {
		errs = append(errs, errors.New("receiver.keep: must be >= 1"))
	}
	if r.ResultsMaxBytes < 0 || (r.ResultsMaxBytes > 0 && r.ResultsMaxBytes < 64<<10) {
		errs = append(errs, errors.New("receiver.results_max_bytes: must be 0 (never rotate by size) or >= 65536 (64 KiB)"))
	}
	if r.ResultsMaxAge < 0 || (r.ResultsMaxAge > 0 && r.ResultsMaxAge < time.Minute) {
		errs = append(errs, errors.New("receiver.results_max_age: must be 0 (never rotate by age) or >= 1m"))
	}
	if r.ResultsKeep < 0 || r.ResultsKeep > 1000 {
		errs = append(errs, errors.New("receiver.results_keep: must be in [0, 1000] (0 deletes the file at rotation)"))
	}
	if r.APIMaxRecords < 1 {
		errs = append(errs, errors.New("receiver.api_max_records: must be >= 1 (flow records kept for /api/v1/, up to 336 bytes each)"))
	}
	if r.SealedQueue < 1 || r.SealedQueue > 1024 {
		errs = append(errs, errors.New("receiver.sealed_queue: must be in [1, 1024] (each queued interval holds a sketch and a flow table)"))
	}
	if r.MaxFrameBytes < 64<<10 {
		errs = append(errs, errors.New("receiver.max_frame_bytes: must be >= 64 KiB"))
	}
	if r.MaxSketchBytes < r.MaxFrameBytes {
		errs = append(errs, errors.New("receiver.max_sketch_bytes: must be >= max_frame_bytes"))
	}
	if r.MaxPending < 2 {
		errs = append(errs, errors.New("receiver.max_pending: must be >= 2"))
	}
	if r.MaxConnections < 1 {
		errs = append(errs, errors.New("receiver.max_connections: must be >= 1"))
	}
	seen := map[string]bool{}
	for i, s := range r.Senders {
		if s.ID == "" {
			errs = append(errs, fmt.Errorf("receiver.senders[%d].id: must not be empty", i))
		}
		if seen[s.ID] {
			errs = append(errs, fmt.Errorf("receiver.senders[%d].id: %q listed twice", i, s.ID))
		}
		seen[s.ID] = true
		if _, err := match.CompileAll(fmt.Sprintf("receiver.senders[%d].select", i), s.Select); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Fingerprint returns every setting that changes a hash, a cell or the
// assignment of packets to intervals, as canonical key → value, except the
// seed: the wire proves that both ends hold the same seed with an HMAC
// over fresh nonces (wire.SeedProof), and nothing derived from the seed
// alone is ever sent.
func (c *Common) Fingerprint() map[string]string {
	f := map[string]string{
		"hash_version":    HashVersion,
		"interval":        c.Interval.String(),
		"max_delay":       c.MaxDelay.String(),
		"guard":           c.Guard.String(),
		"sketch.rows":     strconv.Itoa(c.Sketch.Rows),
		"sketch.columns":  strconv.Itoa(c.Sketch.Columns),
		"sketch.vlda":     strconv.Itoa(c.Sketch.VLDA),
		"sketch.sampling": floats(c.SketchParams().Sampling, c.Sketch.Rows),
		"sketch.bytes":    strconv.FormatBool(c.Sketch.Bytes),
		"lda.banks":       strconv.Itoa(c.LDA.Banks),
		"lda.cells":       strconv.Itoa(c.LDA.Cells),
		"capture.weights": digestYAML(c.Capture.Weights),
		"capture.classes": digestYAML(c.Capture.Classes),
	}
	c.Lost.fingerprint(f)
	cc := c.CaptureConfig()
	for k, v := range cc.FingerprintFields() {
		if k == "capture.identity.seed" || k == "seed" {
			continue // covered by sketch.seed, never in clear
		}
		f[k] = v
	}
	return f
}

func floats(v []float64, rows int) string {
	if len(v) == 0 {
		v = make([]float64, rows)
		for i := range v {
			v[i] = 1
		}
	}
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	return strings.Join(s, ",")
}

func digestYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return "unencodable"
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// Logger makes the daemon's logger from the log section.
func (l Log) Logger(w io.Writer) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: lv}
	if l.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
