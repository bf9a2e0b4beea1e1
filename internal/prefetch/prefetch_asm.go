//go:build amd64 || arm64

package prefetch

// lines is in prefetch_$GOARCH.s.
//
//go:noescape
func lines(addrs []uintptr)
