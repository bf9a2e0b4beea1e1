package capture

import (
	"fmt"
	"net"
	"strings"

	"github.com/safchain/ethtool"
)

// coalescingFeatures are the kernel's names (ETH_SS_FEATURES) of the
// receive offloads that merge several wire packets into one frame, with
// the word `ethtool -K` takes to turn each off.
var coalescingFeatures = []struct{ kernel, ethtoolK string }{
	{"rx-gro", "gro"},
	{"rx-lro", "lro"},
	{"rx-gro-hw", "rx-gro-hw"},
	{"rx-gro-list", "rx-gro-list"},
}

// ErrCoalescing is wrapped by the error that refuses an interface whose
// receive offloads coalesce packets.
var ErrCoalescing = fmt.Errorf("capture: the interface coalesces received packets")

// coalescingOn returns the ethtool -K names of the coalescing offloads
// that are on at ifname. It reads the features through the ethtool ioctl
// (github.com/safchain/ethtool) on a socket made on the calling thread,
// so call it in the interface's network namespace.
func coalescingOn(ifname string) ([]string, error) {
	e, err := ethtool.NewEthtool()
	if err != nil {
		return nil, err
	}
	defer e.Close()
	f, err := e.Features(ifname)
	if err != nil {
		return nil, err
	}
	var on []string
	for _, c := range coalescingFeatures {
		if f[c.kernel] {
			on = append(on, c.ethtoolK)
		}
	}
	return on, nil
}

// checkCoalescing refuses an interface with a coalescing offload on,
// unless capture.source.allow_coalescing is set. A feature read that
// fails (an interface without ethtool support) is not a refusal: the
// oversize-frame counter still sees super-packets. Loopback is never
// refused: its GRO flag is on by default but the loopback device hands
// packets to the stack through the backlog, where no GRO runs.
func checkCoalescing(cfg SourceConfig, warn func(msg string, args ...any)) error {
	if ifc, err := net.InterfaceByName(cfg.Interface); err == nil && ifc.Flags&net.FlagLoopback != 0 {
		return nil
	}
	on, err := coalescingOn(cfg.Interface)
	if err != nil {
		warn("cannot read the capture interface's offload features; coalescing (GRO/LRO) not checked", "interface", cfg.Interface, "err", err)
		return nil
	}
	if len(on) == 0 {
		return nil
	}
	if cfg.AllowCoalescing {
		warn("capture interface coalesces received packets (allowed by capture.source.allow_coalescing): the two taps may see different packets",
			"interface", cfg.Interface, "offloads_on", strings.Join(on, ","))
		return nil
	}
	return fmt.Errorf("%w: %s on %q, so this tap would see merged super-packets instead of the packets on the wire, and the two taps would disagree; turn it off with: %s (or set capture.source.allow_coalescing: true to run anyway)",
		ErrCoalescing, strings.Join(on, ", "), cfg.Interface, OffloadOffCommand(cfg.Interface, on))
}

// OffloadOffCommand is the ethtool command that turns off the coalescing
// offloads named in on (ethtool -K names), always with gro and lro.
func OffloadOffCommand(ifname string, on []string) string {
	args := []string{"ethtool", "-K", ifname, "gro", "off", "lro", "off"}
	for _, o := range on {
		if o != "gro" && o != "lro" {
			args = append(args, o, "off")
		}
	}
	return strings.Join(args, " ")
}

// CoalescingOffloads returns the ethtool -K names of the receive offloads
// that coalesce packets and are on at ifname (the daemons' preflight).
func CoalescingOffloads(ifname string) ([]string, error) { return coalescingOn(ifname) }
