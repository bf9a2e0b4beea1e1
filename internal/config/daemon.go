package config

import "flag"

// CommonFlags registers the flags both daemons have over keys of the
// common part, --interface and --log-level, and returns what applies them
// to a loaded configuration: a flag left empty keeps the file's value.
func CommonFlags(fs *flag.FlagSet) func(*Common) {
	iface := fs.String("interface", "", "capture interface (overrides capture.source.interface)")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (overrides log.level)")
	return func(c *Common) {
		if *iface != "" {
			c.Capture.Source.Interface = *iface
		}
		if *logLevel != "" {
			c.Log.Level = *logLevel
		}
	}
}
