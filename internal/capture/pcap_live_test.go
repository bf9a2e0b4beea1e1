//go:build pcap && linux

package capture

import (
	"strings"
	"testing"
)

func TestLivePcap(t *testing.T) {
	v := newVeth(t)
	src := DefaultConfig().Source
	src.Kind, src.Interface, src.Promiscuous = "pcap", v.ifB, true
	src.TimestampSource = "host"
	src.BPF = "ip or ip6 or vlan"
	liveRoundTrip(t, v, src)
}

// A timestamp source the interface lacks is refused with a clear error.
func TestPcapTimestampSourceRefused(t *testing.T) {
	v := newVeth(t)
	src := DefaultConfig().Source
	src.Kind, src.Interface, src.TimestampSource = "pcap", v.ifB, "adapter_unsynced"
	err := inNetns(v.nsB, func() error {
		s, err := OpenPcap(src, nil)
		if err == nil {
			s.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "does not offer") || !strings.Contains(err.Error(), "capture.source.timestamp_source") {
		t.Errorf("veth has no adapter clock; got %v", err)
	}
	src.TimestampSource = "no-such-clock"
	if _, err := OpenPcap(src, nil); err == nil || !strings.Contains(err.Error(), "not a libpcap timestamp type") {
		t.Errorf("bad name: %v", err)
	}
}
