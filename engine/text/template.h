/* template.h: GLM-5's chat template, rendered natively: a request in, the exact prompt text out.
 * Equal to HF's jinja rendering of the GLM-5 family chat_template.jinja (tests/fixtures/text/README.md
 * says which file and how it is checked), after glmchat's request normalisation (below).
 *
 * API:
 *   tmpl_render_json(request, out, err)    an OpenAI-style request object (jv, see json.h):
 *       messages[]      {role, content (string | parts[] | null), reasoning_content | reasoning,
 *                        tool_calls[{id, function{name, arguments (object | JSON string)}}], tool_call_id}
 *       tools[]         OpenAI tools ({"type":"function","function":{...}}) or bare functions
 *       reasoning_effort  none | minimal | low | medium | high | xhigh | max (none: thinking off);
 *                         another value is refused by name (the template would render it as Max)
 *       enable_thinking   bool (also inside chat_template_kwargs, which may set clear_thinking too)
 *       clear_thinking    bool: earlier turns' reasoning (assistant turns up to the last user
 *                         message) rendered as an empty think block, as the template does with
 *                         its clear_thinking; default false (kept). chat_template_kwargs' wins.
 *     Normalisation, as OpenAI-compatible servers do before the template: null content is "",
 *     string arguments are parsed (they must be a JSON object; null or "" is {}), "reasoning" is read
 *     as reasoning_content. Thinking off renders the template, drops "<|system|>Reasoning Effort: Max"
 *     and closes the prompt's "<think>" with "</think>" (TensorFold's rule). The generation prompt is
 *     always added. A request the template cannot render is GLM_ERR_ARG with the reason.
 *   tmpl_render(glm_request, out, err)     the engine's request, through tmpl_request_from_glm
 *   tmpl_request_from_glm(r, err)          the OpenAI-style jv for a glm_request (caller frees) */
#ifndef GLMCHAT_TEXT_TEMPLATE_H
#define GLMCHAT_TEXT_TEMPLATE_H

#include "engine/text/json.h"
#include "engine/text/tbuf.h"
#include "glm.h"

glm_status tmpl_render_json(const jv *request, tbuf *out, glm_error *err);
glm_status tmpl_render(const glm_request *r, tbuf *out, glm_error *err);
jv *tmpl_request_from_glm(const glm_request *r, glm_error *err);

#endif
