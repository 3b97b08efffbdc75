# engine/text/local.mk: tokenizer, chat template and reply stream parser.
# Adds its sources to libengine.a (libengine_a_SOURCES +=).
