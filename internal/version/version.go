// Package version names this build.
package version

// Version is overridden at link time: -ldflags "-X github.com/lds-net/lds/internal/version.Version=v1.2.3".
var Version = "0.1.0-dev"
