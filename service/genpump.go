package service

// genPump runs a generation that no request runs (a resumable stream's, a
// background response's), taken apart at its waits (steps), on goroutines
// of its own while it has something to do: a wait for its engine longer
// than wsWaitInline is parked in the server's waitPool, as a WebSocket
// stream's is, so that a generation that waits holds no goroutine. At its
// end finish runs, on the generation's goroutine.
type genPump struct {
	waits  *waitPool
	steps  wsSteps
	finish func(u *Usage, err error)
}

// start runs the steps' first next on the caller's goroutine (what is
// ready at once, the opening events, is written when start returns), then
// goes on on a goroutine of the generation's.
func (p *genPump) start(waits *waitPool, steps wsSteps, finish func(u *Usage, err error)) {
	p.waits, p.steps, p.finish = waits, steps, finish
	if over, u, err := steps.next(); over {
		go finish(u, err)
		return
	}
	go p.waitAndPump()
}

// pump writes what the engine has ready, waiting for more up to
// wsWaitInline at a time, then parks; at the end it finishes.
func (p *genPump) pump() {
	for {
		if over, u, err := p.steps.next(); over {
			p.finish(u, err)
			return
		}
		if !p.waitInline() {
			return
		}
	}
}

// waitAndPump is pump after a wait: the generation's first goroutine.
func (p *genPump) waitAndPump() {
	if p.waitInline() {
		p.pump()
	}
}

// waitInline waits up to wsWaitInline for the engine and reports true
// when it may have something; otherwise it parks the wait, whose end
// pumps on, and reports false.
func (p *genPump) waitInline() bool {
	if p.steps.waitFor(wsWaitInline) {
		return true
	}
	if on, ok := p.steps.parkable(); ok {
		p.waits.park(on, p.pump)
	} else {
		go func() {
			p.steps.wait()
			p.pump()
		}()
	}
	return false
}
