package preflight

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/lds-net/lds/internal/config"
)

// LogStartWarnings logs, at WARN, what a daemon about to start should
// still be told: a guessable sketch.seed and private keys readable by
// every user of the host. secrets maps keys (sender.tls.key) to paths.
func LogStartWarnings(log *slog.Logger, c *config.Common, secrets map[string]string) {
	if msg := config.WeakSeed(c.Sketch.Seed); msg != "" {
		log.Warn("sketch.seed is weak: "+msg, "key", "sketch.seed", "fix", "set sketch.seed at both ends to the output of `openssl rand -hex 16`")
	}
	for key, path := range secrets {
		if path == "" {
			continue
		}
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o004 != 0 {
			log.Warn("a private key is readable by every user of this host", "key", key, "path", path,
				"mode", fi.Mode().Perm().String(), "fix", fmt.Sprintf("chgrp lds %s && chmod 0640 %s", path, path))
		}
	}
}
