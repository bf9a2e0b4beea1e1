//go:build !linux

package capture

import "os"

func mapFile(*os.File) []byte { return nil }
func unmapFile([]byte)        {}
func dropMapped([]byte)       {}
