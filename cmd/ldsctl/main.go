// Command ldsctl is the operator's tool: replay two captures through both
// pipelines, size a sketch, query a receiver, generate and evaluate traces.
package main

import (
	"fmt"
	"os"

	"github.com/lds-net/lds/internal/version"
)

const usage = `Usage: ldsctl <command> [flags]

Commands:
  replay    run sender and receiver pipelines on two captures over real gRPC (loopback)
  size      compute sketch rows and columns for a traffic mix (LDS paper §3)
  memory    worst-case memory of the daemons from their configuration (MemoryMax=)
  results   query a receiver's results API and print a table
  gen       write a two-tap capture pair with exact ground truth from a scenario
  eval      compare results JSONL with ground truth: accuracy report and plots
  join      exact per-packet join of two captures: ground truth for eval

Run 'ldsctl <command> -h' for a command's flags; 'ldsctl --version' prints the version.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"replay": cmdReplay, "size": cmdSize, "results": cmdResults, "gen": cmdGen, "eval": cmdEval, "join": cmdJoin,
		"memory": cmdMemory,
	}
	name := os.Args[1]
	if name == "-h" || name == "--help" || name == "help" {
		fmt.Print(usage)
		return
	}
	if name == "-version" || name == "--version" || name == "version" {
		fmt.Println("ldsctl", version.Version)
		return
	}
	run, ok := cmds[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "ldsctl: unknown command %q\n\n%s", name, usage)
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "ldsctl %s: %v\n", name, err)
		os.Exit(1)
	}
}
