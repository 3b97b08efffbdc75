# app/chat.mk: the chat loop, tools (built-in and MCP), config file and scripted mode.
# Adds its sources to libapp.a (libapp_a_SOURCES +=).
