package preflight

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/lds-net/lds/internal/capture"
	"github.com/lds-net/lds/internal/config"
)

func contextTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// captureChecks checks the capture source: the interface exists, is up
// with a carrier, is promiscuous if configured so, and does not coalesce.
func captureChecks(r *Report, c *config.Common) {
	s := c.Capture.Source
	if s.Kind == "file" {
		if _, err := os.Stat(s.File); err != nil {
			r.add(Fail, "capture.source.file", s.File, err.Error()+" (a daemon reading a file stops at once without it)", "set capture.source.file to a capture, or kind: afpacket")
		} else {
			r.add(OK, "capture.source.file", s.File, "exists", "")
		}
		return
	}
	const key = "capture.source.interface"
	ifc, err := net.InterfaceByName(s.Interface)
	if err != nil {
		r.add(Fail, key, s.Interface, "no such interface on this host (the daemon would wait for it forever)",
			"set capture.source.interface to the tap, one of: "+strings.Join(interfaceNames(), ", "))
		return
	}
	if ifc.Flags&net.FlagUp == 0 {
		r.add(Warn, key, s.Interface, "is down: the daemon waits for it and measures nothing meanwhile", "ip link set "+s.Interface+" up")
	} else if st := operState(s.Interface); st != "" && st != "up" && st != "unknown" {
		r.add(Warn, key, s.Interface, "is up but its link is "+st+" (no carrier): the daemon waits for it", "check the tap's cable or mirror session")
	} else {
		r.add(OK, key, s.Interface, "exists and is up", "")
	}
	if !s.Promiscuous && ifc.Flags&net.FlagLoopback == 0 {
		r.add(Warn, "capture.source.promiscuous", "false", "a mirror port or tap delivers frames addressed to other hosts, which the NIC drops without promiscuous mode",
			"set capture.source.promiscuous: true (the default) unless the capture host is itself an end of every measured flow")
	}
	if ifc.Flags&net.FlagLoopback != 0 {
		return
	}
	on, err := capture.CoalescingOffloads(s.Interface)
	switch {
	case err != nil:
		r.add(Warn, key, s.Interface, "cannot read its offload features ("+err.Error()+"): coalescing (GRO/LRO) not checked", "ethtool -k "+s.Interface+" | grep receive-offload")
	case len(on) > 0 && s.AllowCoalescing:
		r.add(Warn, key, s.Interface, fmt.Sprintf("coalesces received packets (%s on; allowed by capture.source.allow_coalescing): the two taps may see different packets", strings.Join(on, ", ")),
			capture.OffloadOffCommand(s.Interface, on))
	case len(on) > 0:
		r.add(Fail, key, s.Interface, fmt.Sprintf("coalesces received packets (%s on): the daemon refuses it, the taps would see merged super-packets", strings.Join(on, ", ")),
			capture.OffloadOffCommand(s.Interface, on)+" (and persist it, README \"Taps\"), or set capture.source.allow_coalescing: true")
	default:
		r.add(OK, key, s.Interface, "no receive coalescing (GRO/LRO off)", "")
	}
}

func operState(ifname string) string {
	b, err := os.ReadFile("/sys/class/net/" + ifname + "/operstate")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func interfaceNames() []string {
	ifs, _ := net.Interfaces()
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	return names
}
