package replay

import (
	"fmt"
	"os"
)

func openConfig(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	return f, nil
}
