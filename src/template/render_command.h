// `infera-router render`: shows the prompt the router renders for a chat request.
//
//   infera-router render --router-tokenizer-path DIR [--tokens] [--now ISO-8601] < body.json
//
// Reads one chat completion request body (JSON) from stdin and writes the rendered prompt
// to stdout exactly (nothing added), or with --tokens the JSON array of token ids (the
// prompt encoded without adding special tokens). --now fixes the time strftime_now reads.
// Exit status 0 on success; 1 with the message on stderr for a template or request error;
// 2 for bad command-line usage.
#pragma once

namespace infera::chat {

// argv as main() receives it; a leading "render" subcommand word (argv[1]) is skipped.
int RunRenderCommand(int argc, char** argv);

}  // namespace infera::chat
