//go:build !linux

package wire

import (
	"net"
	"time"
)

// queuedBytes is unknown off Linux: progress counts bytes read only.
func queuedBytes(net.Conn) int64 { return 0 }

// deferAccept is Linux's TCP_DEFER_ACCEPT; elsewhere the gate's pool alone
// bounds idle sockets.
func deferAccept(net.Listener, time.Duration) error { return nil }
