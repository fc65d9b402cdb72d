//! The MCP handler: the tools' router, with safe mode deciding which are listed and callable.
use crate::db::CallError;
use crate::tools::{Worlds, ERRORS, INSTRUCTIONS};
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

/// The tools safe mode keeps: the read-only ones, and the two whose calls it narrows (`merge` to a dry
/// run, `statement` to the spec's reads).
fn kept_in_safe_mode(tool: &Tool) -> bool {
    let read_only = tool.annotations.as_ref().and_then(|a| a.read_only_hint).unwrap_or(false);
    read_only || tool.name == "merge" || tool.name == "statement" || tool.name == "query"
}

impl Worlds {
    fn safe_for(&self, ctx: &RequestContext<RoleServer>) -> bool {
        self.call_of(ctx).map(|c| c.safe).unwrap_or(self.safe)
    }
}

impl ServerHandler for Worlds {
    fn get_info(&self) -> ServerConfig {
        let mode = if self.safe { " This server runs in safe mode: only reads, DIFF and merge dry runs." } else { "" };
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("worlds-mcp", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!("{INSTRUCTIONS}{mode} {ERRORS}"))
    }

    async fn list_tools(&self, _request: Option<PaginatedRequestParams>, ctx: RequestContext<RoleServer>) -> Result<ListToolsResult, ErrorData> {
        let safe = self.safe_for(&ctx);
        let tools = self.tool_router.list_all().into_iter().filter(|t| !safe || kept_in_safe_mode(t)).collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tool_router.get(name).cloned()
    }

    async fn call_tool(&self, request: CallToolRequestParams, ctx: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        if self.safe_for(&ctx) {
            if let Some(tool) = self.tool_router.get(&request.name) {
                if !kept_in_safe_mode(tool) {
                    let e = CallError::new("25006", format!("{} changes something, and MCP safe mode only reads", request.name))
                        .with_hint("safe mode allows list_worlds, query (read-only), describe, diff, merge with dry_run, check_reads, merge_checks, check_merge_policy, reviews, history and statement (reads)");
                    return Ok(crate::untrusted::error(&e).into());
                }
            }
        }
        let tcc = ToolCallContext::new(self, request, ctx);
        self.tool_router.call(tcc).await
    }
}
