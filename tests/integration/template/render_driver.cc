// Test driver for `infera-router render` until the router binary dispatches to it.
#include "template/render_command.h"

int main(int argc, char** argv) { return infera::chat::RunRenderCommand(argc, argv); }
