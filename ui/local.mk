# ui/local.mk: the views the app talks to (view.h): ncurses TUI and plain stdio.
