package e2e

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
)

// Addresses of the real-traffic testbed (RunReal): two routed subnets of
// the benchmarking range (RFC 2544), joined by a Linux router namespace.
var (
	RealSndAddr = netip.MustParseAddr("198.18.1.1")   // the sender host
	RealRtrSnd  = netip.MustParseAddr("198.18.1.254") // the router, towards the sender host
	RealRtrRcv  = netip.MustParseAddr("198.18.2.254") // the router, towards the receiver host
	RealRcvAddr = netip.MustParseAddr("198.18.2.1")   // the receiver host
	RealSndNet  = netip.MustParsePrefix("198.18.1.0/24")
	RealRcvNet  = netip.MustParsePrefix("198.18.2.0/24")
)

// Interface names of the real-traffic testbed (per namespace).
const (
	IfRealSnd    = "h0" // the sender host's veth
	IfRealTapA   = "r0" // the router's ingress from the sender host: tap A
	IfRealBottle = "r1" // the router's egress to the receiver host: the HTB bottleneck
	IfRealTapB   = "h1" // the receiver host's ingress: tap B
)

// MAC addresses of the data veths (locally administered), so that the
// neighbours can be written down and no ARP crosses the bottleneck.
const (
	macSnd    = "02:00:c6:12:01:01"
	macTapA   = "02:00:c6:12:01:fe"
	macBottle = "02:00:c6:12:02:fe"
	macTapB   = "02:00:c6:12:02:01"
)

// Bottleneck is the router's egress queue towards the receiver host: an
// HTB class of RateMbit with a pfifo of Limit packets, tail drop.
type Bottleneck struct {
	RateMbit int
	Limit    int // packets
}

// QueueDelayMS is the time a full FIFO of 1514-byte frames takes to drain.
func (b Bottleneck) QueueDelayMS() float64 {
	return float64(b.Limit) * 1514 * 8 / (float64(b.RateMbit) * 1e6) * 1e3
}

// RealTopology is the sender host, router and receiver host namespaces.
type RealTopology struct {
	Snd, Rtr, Rcv string
}

// NewRealTopology creates prefix-snd, prefix-rtr and prefix-rcv:
//
//	snd h0 ──veth── r0 rtr r1 ──veth── h1 rcv
//	                   rtr c0 ──veth── c1 rcv   (control: gRPC)
//
// rtr routes 198.18.1.0/24 and 198.18.2.0/24 (IPv4 forwarding on); r1's
// egress is the bottleneck. Neighbours are permanent (no ARP on the data
// links). Segmentation and receive offloads are off on
// every data veth (gro, gso, tso), so the taps see wire-sized packets;
// with groAtTaps the taps r0 and h1 get `gro on` again (the refusal
// check). On error, whatever was made is deleted.
func NewRealTopology(prefix string, b Bottleneck, groAtTaps bool) (_ *RealTopology, err error) {
	t := &RealTopology{Snd: prefix + "-snd", Rtr: prefix + "-rtr", Rcv: prefix + "-rcv"}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	for _, ns := range []string{t.Snd, t.Rtr, t.Rcv} {
		if err := ip("netns", "add", ns); err != nil {
			return nil, err
		}
	}
	steps := [][]string{
		{"-n", t.Snd, "link", "add", IfRealSnd, "address", macSnd, "type", "veth", "peer", "name", IfRealTapA, "address", macTapA, "netns", t.Rtr},
		{"-n", t.Rtr, "link", "add", IfRealBottle, "address", macBottle, "type", "veth", "peer", "name", IfRealTapB, "address", macTapB, "netns", t.Rcv},
		{"-n", t.Rtr, "link", "add", IfMidCtl, "type", "veth", "peer", "name", IfDstCtl, "netns", t.Rcv},
		{"-n", t.Snd, "addr", "add", RealSndAddr.String() + "/24", "dev", IfRealSnd},
		{"-n", t.Rtr, "addr", "add", RealRtrSnd.String() + "/24", "dev", IfRealTapA},
		{"-n", t.Rtr, "addr", "add", RealRtrRcv.String() + "/24", "dev", IfRealBottle},
		{"-n", t.Rcv, "addr", "add", RealRcvAddr.String() + "/24", "dev", IfRealTapB},
		{"-n", t.Rtr, "addr", "add", MidCtl.String() + "/30", "dev", IfMidCtl},
		{"-n", t.Rcv, "addr", "add", DstCtl.String() + "/30", "dev", IfDstCtl},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return nil, err
		}
	}
	for _, x := range []struct {
		ns  string
		ifs []string
	}{{t.Snd, []string{"lo", IfRealSnd}}, {t.Rtr, []string{"lo", IfRealTapA, IfRealBottle, IfMidCtl}}, {t.Rcv, []string{"lo", IfRealTapB, IfDstCtl}}} {
		// IPv6 off: no router solicitations or MLD reports on the taps.
		_ = exec.Command("ip", "netns", "exec", x.ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1").Run()
		for _, i := range x.ifs {
			if err := ip("-n", x.ns, "link", "set", i, "up"); err != nil {
				return nil, err
			}
		}
	}
	if err := nsRun(t.Rtr, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		return nil, err
	}
	for _, r := range [][]string{
		{"-n", t.Snd, "route", "add", RealRcvNet.String(), "via", RealRtrSnd.String()},
		{"-n", t.Rcv, "route", "add", RealSndNet.String(), "via", RealRtrRcv.String()},
		// Permanent neighbours: no ARP on the data links, so the
		// bottleneck's FIFO holds (and drops) only measured packets.
		{"-n", t.Snd, "neigh", "replace", RealRtrSnd.String(), "lladdr", macTapA, "dev", IfRealSnd, "nud", "permanent"},
		{"-n", t.Rtr, "neigh", "replace", RealSndAddr.String(), "lladdr", macSnd, "dev", IfRealTapA, "nud", "permanent"},
		{"-n", t.Rtr, "neigh", "replace", RealRcvAddr.String(), "lladdr", macTapB, "dev", IfRealBottle, "nud", "permanent"},
		{"-n", t.Rcv, "neigh", "replace", RealRtrRcv.String(), "lladdr", macBottle, "dev", IfRealTapB, "nud", "permanent"},
	} {
		if err := ip(r...); err != nil {
			return nil, err
		}
	}
	for _, x := range []struct{ ns, ifc string }{{t.Snd, IfRealSnd}, {t.Rtr, IfRealTapA}, {t.Rtr, IfRealBottle}, {t.Rcv, IfRealTapB}} {
		if err := nsRun(x.ns, "ethtool", "-K", x.ifc, "gro", "off", "gso", "off", "tso", "off"); err != nil {
			return nil, err
		}
	}
	if groAtTaps {
		for _, x := range []struct{ ns, ifc string }{{t.Rtr, IfRealTapA}, {t.Rcv, IfRealTapB}} {
			if err := nsRun(x.ns, "ethtool", "-K", x.ifc, "gro", "on"); err != nil {
				return nil, err
			}
		}
	}
	rate := strconv.Itoa(b.RateMbit) + "mbit"
	for _, q := range [][]string{
		{"qdisc", "add", "dev", IfRealBottle, "root", "handle", "1:", "htb", "default", "10"},
		{"class", "add", "dev", IfRealBottle, "parent", "1:", "classid", "1:10", "htb", "rate", rate, "ceil", rate, "quantum", "1514"},
		{"qdisc", "add", "dev", IfRealBottle, "parent", "1:10", "handle", "10:", "pfifo", "limit", strconv.Itoa(b.Limit)},
	} {
		if err := nsRun(t.Rtr, append([]string{"tc"}, q...)...); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// QdiscStats returns `tc -s qdisc show` of the bottleneck (sent, dropped).
func (t *RealTopology) QdiscStats() string {
	out, _ := exec.Command("ip", "netns", "exec", t.Rtr, "tc", "-s", "qdisc", "show", "dev", IfRealBottle).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// Close deletes the namespaces (and with them every veth).
func (t *RealTopology) Close() error {
	var errs []error
	for _, ns := range []string{t.Snd, t.Rtr, t.Rcv} {
		if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			errs = append(errs, fmt.Errorf("testbed: ip netns del %s: %w: %s", ns, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// nsRun runs a command in a namespace and waits for it.
func nsRun(ns string, argv ...string) error {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testbed: in %s: %s: %w: %s", ns, strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
