//! Owns the fleet's HTML page (stub, replaced below).
use super::aggregate::FleetSummary;
use super::thresholds::Suggestion;
pub fn render_html(_s: &FleetSummary, _sug: &[Suggestion]) -> String {
    String::new()
}
