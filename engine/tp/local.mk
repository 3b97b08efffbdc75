# engine/tp/local.mk: two ranks: the control protocol, bootstrap, heartbeat and the transports
# (tcp, rdma). Adds its sources to libengine.a (libengine_a_SOURCES +=).
