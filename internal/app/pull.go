package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"rill/config"
	"rill/hub"
)

// Pull runs `rill pull` with its command-line arguments args: it makes sure
// the model ORG/REPO[:QUANT] is in the Hugging Face Hub cache, downloading
// what is missing, and prints the path of the file to open to stdout.
// Progress goes to stderr: a bar on a terminal, log lines otherwise. It
// returns flag.ErrHelp after printing the usage for -h.
func Pull(ctx context.Context, args []string) error {
	return pull(ctx, args, os.Stdout)
}

// pull is Pull, printing the path to stdout.
func pull(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pull", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: rill pull [flags] ORG/REPO[:QUANT]

Downloads a GGUF model from the Hugging Face Hub into its cache
($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub) and
prints its path. QUANT (e.g. Q4_K_M, Q8_0; any case) picks the file;
without it Q4_K_M, then Q8_0, then the first GGUF. Environment: HF_TOKEN
(private and gated repositories), HF_ENDPOINT (a mirror), HF_HUB_OFFLINE=1
(no network: resolve from the cache).

`)
		fs.PrintDefaults()
	}
	revision := fs.String("revision", "main", "branch or commit of the repository")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("want one model, ORG/REPO[:QUANT]; got %d arguments", fs.NArg())
	}
	ref, err := hub.ParseRef(fs.Arg(0))
	if err != nil {
		return err
	}
	log, err := newLogger(os.Stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	opts := hubOptions(log)
	opts.Revision = *revision
	res, err := hub.Pull(ctx, ref, opts)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, res.Path)
	return err
}

// hubOptions are the hub options of the environment (HF_TOKEN, HF_ENDPOINT,
// HF_HOME, HF_HUB_OFFLINE...), progress going to stderr: a bar on a
// terminal, log lines to log otherwise.
func hubOptions(log *slog.Logger) hub.Options {
	o := hub.Env(os.Getenv)
	o.Logger = log
	if isTerminal(os.Stderr) {
		o.Progress = &barProgress{w: os.Stderr}
	} else {
		o.Progress = &logProgress{log: log, every: 10 * time.Second}
	}
	return o
}

// resolveHubModels replaces the hf://ORG/REPO[:QUANT] references among the
// native models' files of ms by the paths of the files in the Hub cache,
// downloading them first where they are missing. A model without an id
// gets the reference ("ORG/REPO:QUANT") as its id.
func resolveHubModels(ctx context.Context, ms []*config.Model, opts hub.Options) error {
	for _, m := range ms {
		n := m.Native
		if n == nil {
			continue
		}
		for _, p := range []*string{&n.Model, &n.DraftModel} {
			if !hub.IsRef(*p) {
				continue
			}
			ref, err := hub.ParseRef(*p)
			if err != nil {
				return err
			}
			res, err := hub.Pull(ctx, ref, opts)
			if err != nil {
				return fmt.Errorf("%s: %w", *p, err)
			}
			if p == &n.Model && m.ID == "" {
				m.ID = ref.String()
			}
			*p = res.Path
		}
	}
	return nil
}

// logProgress logs a download's progress every so often, for logs that
// are not a terminal.
type logProgress struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  time.Time
	start time.Time
	from  int64 // bytes already there when the file started
	file  string
}

func (p *logProgress) Update(file string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if file != p.file {
		p.file, p.start, p.last, p.from = file, now, now, done
		return
	}
	if now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	attrs := []any{slog.String("file", file), slog.Int64("bytes", done)}
	if total > 0 {
		attrs = append(attrs, slog.Int64("size", total), slog.String("done", fmt.Sprintf("%.1f%%", 100*float64(done)/float64(total))))
	}
	if s := now.Sub(p.start).Seconds(); s > 0 {
		attrs = append(attrs, slog.String("rate", humanBytes(float64(done-p.from)/s)+"/s"))
	}
	p.log.Info("hub: downloading", attrs...)
}

func (p *logProgress) Done(file string, err error) {
	if err == nil {
		p.log.Info("hub: file ready", slog.String("file", file))
	}
	p.mu.Lock()
	p.file = ""
	p.mu.Unlock()
}

// barProgress draws a progress bar on a terminal, redrawn in place at most
// ten times a second.
type barProgress struct {
	w     io.Writer
	mu    sync.Mutex
	file  string
	start time.Time
	last  time.Time
	from  int64
	drawn bool
}

func (p *barProgress) Update(file string, done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if file != p.file {
		p.file, p.start, p.from = file, now, done
	} else if now.Sub(p.last) < 100*time.Millisecond && done != total {
		return
	}
	p.last = now
	p.drawn = true
	const width = 30
	bar, pct := strings.Repeat("?", width), "  ?%"
	if total > 0 {
		filled := int(int64(width) * done / total)
		bar = strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
		pct = fmt.Sprintf("%3d%%", 100*done/total)
	}
	rate := ""
	if s := now.Sub(p.start).Seconds(); s > 0.2 {
		rate = " " + humanBytes(float64(done-p.from)/s) + "/s"
	}
	fmt.Fprintf(p.w, "\r\033[K%s [%s] %s %s/%s%s", file, bar, pct, humanBytes(float64(done)), humanBytes(float64(total)), rate)
}

func (p *barProgress) Done(file string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
	}
	p.file, p.drawn = "", false
}

// humanBytes writes n bytes in binary units (12.3 MiB).
func humanBytes(n float64) string {
	if n < 0 {
		return "?"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f %s", n, units[i])
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}
