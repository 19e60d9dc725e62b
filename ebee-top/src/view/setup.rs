//! The setup screen (F2) over the panes: the columns (shown ones first, in order, then the
//! others), the default sort, the interval, the colours and the tree default, with where they
//! are saved and the keys.

use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    text::Line,
    widgets::{Block, Borders, Clear, List, ListItem, ListState, Paragraph, Wrap},
};

use crate::app::settings::sort_key;
use crate::app::{App, SETUP_KEYS, SetupRow};
use crate::view::theme::{Theme, border_set};

/// One line's text.
fn line(app: &App, row: SetupRow) -> String {
    let value = |name: &str, v: String| format!("    {name:<9} < {v} >");
    match row {
        SetupRow::Column(c, shown) => {
            let (name, what) = c.describe();
            let mark = if shown { "[x]" } else { "[ ]" };
            format!("{mark} {name:<8} {what}")
        }
        SetupRow::Sort => value(
            "sort",
            sort_key(app.settings.sort.unwrap_or(app.sort)).to_uppercase(),
        ),
        SetupRow::Interval => value(
            "interval",
            super::fmt_ns(app.settings.interval.unwrap_or(app.interval).as_nanos() as u64),
        ),
        SetupRow::Color => value("colours", app.color.key().into()),
        SetupRow::Tree => value("tree", if app.tree_default { "on" } else { "off" }.into()),
    }
}

pub fn render(app: &App, t: &Theme, cursor: usize, f: &mut Frame, area: Rect) {
    let rows = app.setup_rows();
    let w = area.width.saturating_sub(4).min(96);
    // The note, the list, the legend (wrapped at words: a few characters of slack a line)
    // and the border.
    let legend_h = SETUP_KEYS
        .len()
        .div_ceil((w as usize).saturating_sub(10).max(20)) as u16;
    let h = (rows.len() as u16 + 3 + legend_h).min(area.height.saturating_sub(2));
    let [_, mid, _] = Layout::vertical([
        Constraint::Fill(1),
        Constraint::Length(h),
        Constraint::Fill(1),
    ])
    .areas(area);
    let [_, r, _] = Layout::horizontal([
        Constraint::Fill(1),
        Constraint::Length(w),
        Constraint::Fill(1),
    ])
    .areas(mid);
    f.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .border_set(border_set(t.ascii))
        .border_style(t.colors.border())
        .title(Line::styled(" setup (F2) ", t.colors.title()));
    let inner = block.inner(r);
    f.render_widget(block, r);
    let [note, list, legend] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(legend_h),
    ])
    .areas(inner);
    let style = if app.settings_note.contains("broken") {
        t.colors.warn()
    } else {
        t.colors.header_row()
    };
    f.render_widget(
        Paragraph::new(Line::styled(app.settings_note.clone(), style)),
        note,
    );
    let items: Vec<ListItem> = rows.iter().map(|r| ListItem::new(line(app, *r))).collect();
    let mut state =
        ListState::default().with_selected(Some(cursor.min(rows.len().saturating_sub(1))));
    f.render_stateful_widget(
        List::new(items)
            .highlight_style(t.colors.selected())
            .highlight_symbol(">"),
        list,
        &mut state,
    );
    f.render_widget(
        Paragraph::new(SETUP_KEYS)
            .style(t.colors.header_row())
            .wrap(Wrap { trim: true }),
        legend,
    );
}
