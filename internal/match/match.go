// Package match holds the traffic rules shared by selection, flow weights,
// LDA classes and metric watch lists. Rules look only at invariant fields
// (addresses, protocol, ports), so both taps classify a packet the same way.
package match

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is the YAML form of one match rule. Every list is an OR of its
// entries; the lists are ANDed; an empty list matches anything.
type Rule struct {
	Name  string   `yaml:"name"`
	Src   []string `yaml:"src"`   // prefixes, e.g. 10.0.0.0/8, 2001:db8::/32, or bare addresses
	Dst   []string `yaml:"dst"`   //
	Proto []int    `yaml:"proto"` // IP protocol numbers
	SPort []string `yaml:"sport"` // "443" or "8000-8100"
	DPort []string `yaml:"dport"` //
}

// PortRange is an inclusive range of ports.
type PortRange struct{ Lo, Hi uint16 }

// Compiled is a Rule ready for the packet path: no allocation when matching.
type Compiled struct {
	Name  string
	Src   []netip.Prefix
	Dst   []netip.Prefix
	Proto []uint8
	SPort []PortRange
	DPort []PortRange
}

// Compile checks r and returns its fast form; key is the YAML path used in
// errors (e.g. "select[2]").
func (r Rule) Compile(key string) (Compiled, error) {
	c := Compiled{Name: r.Name}
	var err error
	if c.Src, err = prefixes(r.Src); err != nil {
		return c, fmt.Errorf("%s.src: %w", key, err)
	}
	if c.Dst, err = prefixes(r.Dst); err != nil {
		return c, fmt.Errorf("%s.dst: %w", key, err)
	}
	for i, p := range r.Proto {
		if p < 0 || p > 255 {
			return c, fmt.Errorf("%s.proto[%d]: %d is not an IP protocol number (0-255)", key, i, p)
		}
		c.Proto = append(c.Proto, uint8(p))
	}
	if c.SPort, err = ports(r.SPort); err != nil {
		return c, fmt.Errorf("%s.sport: %w", key, err)
	}
	if c.DPort, err = ports(r.DPort); err != nil {
		return c, fmt.Errorf("%s.dport: %w", key, err)
	}
	return c, nil
}

// CompileAll compiles a list of rules; base names the YAML list (e.g. "weights").
func CompileAll(base string, rules []Rule) ([]Compiled, error) {
	out := make([]Compiled, 0, len(rules))
	for i, r := range rules {
		c, err := r.Compile(fmt.Sprintf("%s[%d]", base, i))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func prefixes(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		s = strings.TrimSpace(s)
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%q is neither a prefix nor an address (want e.g. 10.0.0.0/8 or 2001:db8::1)", s)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a prefix: %w", s, err)
		}
		out = append(out, netip.PrefixFrom(p.Addr().Unmap(), p.Bits()).Masked())
	}
	return out, nil
}

func ports(ss []string) ([]PortRange, error) {
	var out []PortRange
	for _, s := range ss {
		lo, hi, found := strings.Cut(strings.TrimSpace(s), "-")
		if !found {
			hi = lo
		}
		l, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
		h, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%q is not a port or range like 8000-8100", s)
		}
		if l > h {
			return nil, fmt.Errorf("%q: range runs backwards", s)
		}
		out = append(out, PortRange{uint16(l), uint16(h)})
	}
	return out, nil
}

// Match reports whether a packet or flow with these invariant fields
// matches. Addresses must be unmapped (4-byte IPv4).
func (c *Compiled) Match(src, dst netip.Addr, proto uint8, sport, dport uint16) bool {
	return matchPrefix(c.Src, src) && matchPrefix(c.Dst, dst) && matchProto(c.Proto, proto) &&
		matchPort(c.SPort, sport) && matchPort(c.DPort, dport)
}

func matchPrefix(ps []netip.Prefix, a netip.Addr) bool {
	if len(ps) == 0 {
		return true
	}
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func matchProto(ps []uint8, p uint8) bool {
	if len(ps) == 0 {
		return true
	}
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

func matchPort(rs []PortRange, p uint16) bool {
	if len(rs) == 0 {
		return true
	}
	for _, r := range rs {
		if p >= r.Lo && p <= r.Hi {
			return true
		}
	}
	return false
}

// First returns the index of the first rule that matches, or -1.
func First(rules []Compiled, src, dst netip.Addr, proto uint8, sport, dport uint16) int {
	for i := range rules {
		if rules[i].Match(src, dst, proto, sport, dport) {
			return i
		}
	}
	return -1
}
