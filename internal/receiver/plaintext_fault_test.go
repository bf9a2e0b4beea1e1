package receiver

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lds-net/lds/internal/capture"
)

// fakeAddrListener reports a chosen address; nothing is ever bound to it,
// so the test never listens on (or sends to) a non-loopback address.
type fakeAddrListener struct {
	net.Listener
	addr net.Addr
}

func (l fakeAddrListener) Addr() net.Addr { return l.addr }

// TestPlaintextRefusedOffLoopback: a receiver configured without TLS
// refuses to serve on any address that is not loopback, saying which key.
func TestPlaintextRefusedOffLoopback(t *testing.T) {
	f := newFaultFixture(t)
	tests := []struct{ addr *net.TCPAddr }{
		{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 7420}},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 7420}},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 7420}},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 7420}},
	}
	for _, tc := range tests {
		t.Run(tc.addr.String(), func(t *testing.T) {
			inner, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer inner.Close()
			src, err := capture.OpenFile(f.receiverPcap)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			rx, err := New(f.cfg, Options{Version: "test", Sources: []capture.Source{src},
				Listener: fakeAddrListener{Listener: inner, addr: tc.addr}, NoHTTP: true, Replay: true, CaptureStart: f.start},
				testLogger(t, "receiver"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err = rx.Run(ctx)
			if err == nil || !strings.Contains(err.Error(), "receiver.tls.plaintext") {
				t.Errorf("plaintext on %s: Run = %v, want a refusal naming receiver.tls.plaintext", tc.addr, err)
			}
		})
	}
}
