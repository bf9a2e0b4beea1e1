package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
)

// Serve listens on cfg.Listen and serves /metrics from reg plus the extra
// handlers (path -> handler, e.g. the results API under /api/), with TLS and
// basic auth from cfg.WebConfig when set, until ctx ends.
func Serve(ctx context.Context, cfg Config, reg *prometheus.Registry, extra map[string]http.Handler, log *slog.Logger) error {
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("metrics.listen %q: %w (is another daemon on this port?)", cfg.Listen, err)
	}
	return ServeListener(ctx, l, cfg, reg, extra, log)
}

// WriteTimeout bounds how long the HTTP server (/metrics and the
// receiver's /api/v1/) takes to write one response.
const WriteTimeout = 30 * time.Second

// ServeListener is Serve on a listener the caller opened (tests use port 0).
// It closes l. With l nil it is Serve: the daemons take a listener from
// their options where one is given.
func ServeListener(ctx context.Context, l net.Listener, cfg Config, reg *prometheus.Registry, extra map[string]http.Handler, log *slog.Logger) error {
	if l == nil {
		return Serve(ctx, cfg, reg, extra, log)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.WebConfig != "" {
		if err := web.Validate(cfg.WebConfig); err != nil {
			_ = l.Close()
			return fmt.Errorf("metrics.web_config %s: %w", cfg.WebConfig, err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelError),
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          reg, // exposes promhttp_metric_handler_errors_total
		EnableOpenMetrics: true,
	}))
	paths := make([]string, 0, len(extra))
	for p, h := range extra {
		if p == "/metrics" || p == "/" {
			_ = l.Close()
			return fmt.Errorf("metrics server: extra handler path %q is reserved", p)
		}
		mux.Handle(p, h)
		paths = append(paths, p)
	}
	sort.Strings(paths)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "lds: /metrics")
		for _, p := range paths {
			fmt.Fprintln(w, "lds:", p)
		}
	})
	// A client that reads slowly cannot hold a response (and its
	// goroutine) for longer than WriteTimeout.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: WriteTimeout, IdleTimeout: 2 * time.Minute}
	webConfig := cfg.WebConfig
	flags := &web.FlagConfig{WebConfigFile: &webConfig}
	done := make(chan error, 1)
	go func() { done <- web.Serve(l, srv, flags, log) }()
	select {
	case err := <-done:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("metrics server on %s: %w", l.Addr(), err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("metrics server on %s: shutting down: %w", l.Addr(), err)
		}
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics server on %s: %w", l.Addr(), err)
		}
		return nil
	}
}
