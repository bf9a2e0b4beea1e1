package replay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/tools/gen"
)

// TestReplayRefusesSwappedCaptures: the generator's two captures given
// the wrong way round are refused before anything is replayed, with a
// message that says so and what to do; the right way round, and with
// AllowReversed, they replay.
func TestReplayRefusesSwappedCaptures(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pcap"), filepath.Join(dir, "b.pcap")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sc := scenario(7, 0)
	sc.Duration = 2 * time.Second
	if _, err := gen.Generate(ctx, sc, gen.Outputs{SenderPcap: a, ReceiverPcap: b}, log); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "r.jsonl")
	_, err = Run(ctx, Options{Config: cfg, SenderPcap: b, ReceiverPcap: a, Out: out}, log)
	if !errors.Is(err, ErrSwapped) {
		t.Fatalf("swapped captures: Run = %v, want ErrSwapped", err)
	}
	for _, want := range []string{"--receiver-pcap " + a + " before --sender-pcap " + b, "upstream tap's capture as --sender-pcap", "--allow-reversed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if sum, err := Run(ctx, Options{Config: cfg, SenderPcap: a, ReceiverPcap: b, Out: out}, log); err != nil || sum.Flows == 0 {
		t.Errorf("the right way round: %d flows, %v", sum.Flows, err)
	}
	if _, err := Run(ctx, Options{Config: cfg, SenderPcap: b, ReceiverPcap: a, Out: out, AllowReversed: true}, log); err != nil {
		t.Errorf("swapped with AllowReversed: %v", err)
	}
}
