# engine/model/exl3.mk: EXL3 weights: bit-exact decode, products through the Hadamard scheme,
# the quantizer. Adds its sources to libengine.a (libengine_a_SOURCES +=).
