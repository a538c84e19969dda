package top

import (
	"context"
	"io"
	"time"

	tea "charm.land/bubbletea/v2"
)

// model is the live view: a snapshot every interval, rates over the last.
type model struct {
	read     func() (Snapshot, error)
	interval time.Duration
	prev     *Snapshot
	cur      *Snapshot
	err      error
}

// sampled is a snapshot taken, or why none could be.
type sampled struct {
	snap Snapshot
	err  error
}

func (m model) sample() tea.Msg {
	s, err := m.read()
	return sampled{s, err}
}

func (m model) Init() tea.Cmd { return m.sample }

func (m model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case sampled:
		m.err = msg.err
		if msg.err == nil {
			m.prev, m.cur = m.cur, &msg.snap
		}
		// The next one an interval after this one, read off the UI's loop.
		return m, tea.Tick(m.interval, func(time.Time) tea.Msg { return m.sample() })
	case tea.KeyPressMsg:
		switch msg.String() {
		case "q", "esc", "ctrl+c":
			return m, tea.Quit
		}
	}
	return m, nil
}

func (m model) View() tea.View {
	var s string
	switch {
	case m.cur == nil && m.err == nil:
		s = "flexgv top: reading the state folder...\n"
	case m.cur != nil:
		s = Render(m.prev, *m.cur)
	}
	if m.err != nil {
		s += "\nflexgv top: " + m.err.Error() + "\n"
	}
	v := tea.NewView(s + "\nq: quit\n")
	v.AltScreen = true
	return v
}

// Run shows the live view on out, reading keys from in, until q, Esc or
// Ctrl-C, or ctx ends.
func Run(ctx context.Context, src Source, interval time.Duration, in io.Reader, out io.Writer) error {
	p := tea.NewProgram(model{read: src.Read, interval: interval}, tea.WithContext(ctx), tea.WithInput(in), tea.WithOutput(out))
	_, err := p.Run()
	return err
}

// Once writes one snapshot as text (as JSON with asJSON), with rates over
// interval: it reads twice, interval apart.
func Once(ctx context.Context, src Source, interval time.Duration, out io.Writer, asJSON bool) error {
	first, err := src.Read()
	if err != nil {
		return err
	}
	select {
	case <-time.After(interval):
	case <-ctx.Done():
		return ctx.Err()
	}
	second, err := src.Read()
	if err != nil {
		return err
	}
	if asJSON {
		return WriteJSON(out, &first, second)
	}
	_, err = io.WriteString(out, Render(&first, second))
	return err
}
