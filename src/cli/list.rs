//! Owns `usbperf-matrix list`: the block-device inventory as a table, YAML or JSON.
use crate::exit::Exit;

#[derive(Debug, clap::Args)]
pub struct ListArgs {}

pub fn run(_cli: &super::Cli, _args: &ListArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("list: inventory is being wired in")
}
