//go:build !pcap

package capture

import (
	"errors"
	"log/slog"

	"golang.org/x/net/bpf"
)

const pcapBuilt = false

var errNoPcap = errors.New("capture: this binary is built without libpcap; rebuild with -tags pcap (needs libpcap-dev and CGO_ENABLED=1)")

// OpenPcap needs a binary built with -tags pcap.
func OpenPcap(SourceConfig, *slog.Logger) (Source, error) { return nil, errNoPcap }

func withBPF(Source, string) (Source, error) { return nil, errNoPcap }

func compileAFPacketBPF(string) ([]bpf.RawInstruction, error) { return nil, errNoPcap }
