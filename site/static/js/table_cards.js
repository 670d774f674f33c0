// A table that becomes a list of cards where its box is narrow (app.css: a container query on
// .table-scroll): each cell then needs its column's name beside it. This module writes that name into
// each body cell's data-label (CSS shows it with ::before), from the header cell of the same column,
// and keeps doing so as rows are redrawn, whatever columns the table has: the code that fills the table
// knows nothing of it.

/** Sets data-label on every body cell of `table` from its column's header text (empty: no label). */
export function labelCells(table) {
  const names = [...(table.tHead?.rows[0]?.cells ?? [])].map((th) => th.textContent.trim());
  for (const body of table.tBodies) {
    for (const row of body.rows) {
      let column = 0;
      for (const cell of row.cells) {
        const name = names[column] ?? "";
        if (cell.dataset.label !== name) cell.dataset.label = name;
        column += cell.colSpan || 1;
      }
    }
  }
}

/** Labels `table`'s cells now and after every change to its rows or header. */
export function labelCellsByHeader(table) {
  labelCells(table);
  // a data-label write changes attributes, not the child list: the observer does not wake itself
  new MutationObserver(() => labelCells(table)).observe(table, { childList: true, subtree: true, characterData: true });
}
