# tools/local.mk: developer scripts (model makers, reference generators); never needed at run time.
