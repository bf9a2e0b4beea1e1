// Package e2e runs lds end to end on real kernel links: three network
// namespaces src — mid — dst joined by veth pairs, the link emulator
// (cmd/lds-linkem) relaying mid's two veths at L2 with configured delay
// and loss, lds-sender tapping mid's ingress veth, lds-receiver tapping
// dst's ingress veth, joined by gRPC over mTLS on a separate control link,
// a Go traffic generator in src, and tcpdump at both taps for ground truth
// (tools/join). See docs/testbed.md.
package e2e

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// Addresses of the testbed. 198.18.0.0/15 is the range set aside for
// benchmarking (RFC 2544); it lives only inside the testbed's namespaces.
var (
	SrcAddr  = netip.MustParseAddr("198.18.0.1") // src's data address
	DstAddr  = netip.MustParseAddr("198.18.0.2") // dst's data address
	MidCtl   = netip.MustParseAddr("198.19.0.1") // mid's end of the control link (sender)
	DstCtl   = netip.MustParseAddr("198.19.0.2") // dst's end of the control link (receiver)
	DataNet  = netip.MustParsePrefix("198.18.0.0/24")
	dstExtra = []string{"198.18.0.3", "198.18.0.4"} // more destinations: more flows per port pair
)

// Interface names inside the namespaces (names are per namespace, so they
// never collide with another testbed).
const (
	IfSrc    = "s0" // src's data veth
	IfMidIn  = "m0" // mid's veth towards src: tap A (lds-sender, tcpdump)
	IfMidOut = "m1" // mid's veth towards dst
	IfDst    = "d0" // dst's data veth: tap B (lds-receiver, tcpdump)
	IfMidCtl = "c0" // mid's control veth
	IfDstCtl = "c1" // dst's control veth
)

// Topology is the three namespaces; Close deletes them.
type Topology struct {
	Src, Mid, Dst string // namespace names
}

// NetnsPath is the path of a namespace made by ip-netns.
func NetnsPath(name string) string { return "/var/run/netns/" + name }

// NewTopology creates prefix-src, prefix-mid and prefix-dst with
//
//	src s0 ──veth── m0 mid m1 ──veth── d0 dst
//	                   mid c0 ──veth── c1 dst   (control: gRPC)
//
// mid has no address on m0/m1: the emulator is an L2 relay, so src and
// dst share 198.18.0.0/24. On error, whatever was made is deleted.
func NewTopology(prefix string) (_ *Topology, err error) {
	t := &Topology{Src: prefix + "-src", Mid: prefix + "-mid", Dst: prefix + "-dst"}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	for _, ns := range []string{t.Src, t.Mid, t.Dst} {
		if err := ip("netns", "add", ns); err != nil {
			return nil, err
		}
	}
	steps := [][]string{
		{"-n", t.Src, "link", "add", IfSrc, "type", "veth", "peer", "name", IfMidIn, "netns", t.Mid},
		{"-n", t.Mid, "link", "add", IfMidOut, "type", "veth", "peer", "name", IfDst, "netns", t.Dst},
		{"-n", t.Mid, "link", "add", IfMidCtl, "type", "veth", "peer", "name", IfDstCtl, "netns", t.Dst},
		{"-n", t.Src, "addr", "add", SrcAddr.String() + "/24", "dev", IfSrc},
		{"-n", t.Dst, "addr", "add", DstAddr.String() + "/24", "dev", IfDst},
		{"-n", t.Mid, "addr", "add", MidCtl.String() + "/30", "dev", IfMidCtl},
		{"-n", t.Dst, "addr", "add", DstCtl.String() + "/30", "dev", IfDstCtl},
	}
	for _, a := range dstExtra {
		steps = append(steps, []string{"-n", t.Dst, "addr", "add", a + "/24", "dev", IfDst})
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return nil, err
		}
	}
	for ns, ifs := range map[string][]string{t.Src: {"lo", IfSrc}, t.Mid: {"lo", IfMidIn, IfMidOut, IfMidCtl}, t.Dst: {"lo", IfDst, IfDstCtl}} {
		// IPv6 off: no router solicitations or MLD reports on the taps.
		_ = exec.Command("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1").Run()
		for _, i := range ifs {
			if err := ip("-n", ns, "link", "set", i, "up"); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// Close deletes the namespaces (and with them every veth).
func (t *Topology) Close() error {
	var errs []error
	for _, ns := range []string{t.Src, t.Mid, t.Dst} {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			errs = append(errs, fmt.Errorf("testbed: ip netns del %s: %w: %s", ns, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testbed: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
