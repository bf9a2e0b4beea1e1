package main

import (
	"strings"
	"testing"
)

// TestReceiverURL: --receiver takes metrics.listen's forms and URLs; the
// rest is refused with what to give instead.
func TestReceiverURL(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{":9465", "http://127.0.0.1:9465", ""},
		{"receiver.example.net:9465", "http://receiver.example.net:9465", ""},
		{"[::1]:9465", "http://[::1]:9465", ""},
		{"http://127.0.0.1:9465", "http://127.0.0.1:9465", ""},
		{"https://r.example.net:9465/", "https://r.example.net:9465", ""},
		{"receiver", "", "not host:port"},
		{":http", "", "is not a number"},
		{"ftp://r:21", "", "scheme ftp"},
	} {
		got, err := receiverURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "host:port or :port") {
				t.Errorf("%q: %q, %v; want an error saying %q and what to give", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
