import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  AMPERSAND_GUIDANCE,
  LONG_LIVED_GUIDANCE,
  SHELL_WRAPPER_GUIDANCE,
  findForegroundHazard,
} from '../../services/dispatcher/tools/terminal/guards/foreground-hazard.js';

void describe('findForegroundHazard', () => {
  void it('uses the reference tool\'s three guidance texts word for word', () => {
    assert.equal(
      findForegroundHazard('nohup ./server'),
      'Foreground command uses shell-level background wrappers (nohup/disown/setsid). Re-send WITHOUT the wrapper ' +
        'as terminal(command="<cmd>", background=true, notify_on_complete=true) so Hermes tracks the process, then ' +
        'run readiness checks and tests in separate commands.',
    );
    assert.equal(
      findForegroundHazard('sleep 100 &'),
      "Foreground command uses '&' backgrounding. Re-send WITHOUT the '&' as terminal(command=\"<cmd>\", " +
        'background=true) — add notify_on_complete=true for bounded jobs — then run health checks and tests in ' +
        'follow-up terminal calls.',
    );
    assert.equal(
      findForegroundHazard('npm run dev'),
      'This foreground command appears to start a long-lived server/watch process. Run it with background=true, ' +
        'verify readiness (health endpoint/log signal), then execute tests in a separate command.',
    );
  });

  void it('answers wrapper before & before server, as the reference tool checks them', () => {
    assert.equal(findForegroundHazard('npm run dev & nohup ./x'), SHELL_WRAPPER_GUIDANCE);
    assert.equal(findForegroundHazard('npm run dev &'), AMPERSAND_GUIDANCE);
    assert.equal(findForegroundHazard('vite; sleep 1 &'), AMPERSAND_GUIDANCE);
  });

  const detachers = [
    'nohup python server.py',
    'nohup python server.py > out.log 2>&1 &',
    'sudo -u www nohup ./run',
    'FOO=1 env BAR=2 nohup ./run',
    './run & disown',
    'setsid ./daemon',
    'cd /srv && setsid -f ./daemon',
  ];
  for (const command of detachers) {
    void it(`refuses ${JSON.stringify(command)} as a shell-level wrapper`, () => {
      assert.equal(findForegroundHazard(command), SHELL_WRAPPER_GUIDANCE);
    });
  }

  const ampersands = [
    'sleep 100 &',
    'sleep 100 & ',
    'python -m server & sleep 1; curl localhost:8000',
    'make build && ./server &',
    'a & b',
    "echo 'done' &",
    'sleep 5 & # later',
    'echo $(sleep 5 &)',
    '(./server &)',
    'cmd > out.log 2>&1 &',
    'cmd &> out.log &',
  ];
  for (const command of ampersands) {
    void it(`refuses the background & in ${JSON.stringify(command)}`, () => {
      assert.equal(findForegroundHazard(command), AMPERSAND_GUIDANCE);
    });
  }

  const servers: [command: string, label: string][] = [
    ['npm run dev', 'npm run dev'],
    ['npm run dev -- --host 0.0.0.0', 'npm run dev'],
    ['npm run start:prod', 'npm run start:prod'],
    ['npm run watch', 'npm run watch'],
    ['npm start', 'npm start'],
    ['cd web && npm start', 'npm start'],
    ['yarn dev', 'yarn dev'],
    ['yarn run serve', 'yarn run serve'],
    ['pnpm dev', 'pnpm dev'],
    ['bun run dev', 'bun run dev'],
    ['vite', 'vite'],
    ['npx vite --port 3000', 'vite'],
    ['./node_modules/.bin/vite preview', 'vite'],
    ['next dev', 'next dev'],
    ['npx next start', 'next start'],
    ['nodemon index.js', 'nodemon'],
    ['uvicorn app:app --reload', 'uvicorn'],
    ['PORT=8000 uvicorn app:app', 'uvicorn'],
    ['uv run uvicorn app:app', 'uvicorn'],
    ['poetry run gunicorn app:app', 'gunicorn'],
    ['gunicorn -w 4 app:app', 'gunicorn'],
    ['flask run', 'flask run'],
    ['python -m flask run', 'python -m flask run'],
    ['python -m http.server', 'python -m http.server'],
    ['python3 -m http.server 8080', 'python3 -m http.server'],
    ['python3 -m uvicorn app:app', 'python3 -m uvicorn'],
    ['python manage.py runserver', 'manage.py runserver'],
    ['php -S localhost:8000', 'php -S'],
    ['rails server', 'rails server'],
    ['rails s -p 3000', 'rails s'],
    ['bundle exec rails s', 'rails s'],
    ['bin/rails server', 'rails server'],
    ['docker compose up', 'docker compose up'],
    ['docker compose -f dev.yml up --build', 'docker compose up'],
    ['docker-compose up', 'docker-compose up'],
    ['docker compose logs -f web', 'docker compose logs -f'],
    ['docker logs -f web', 'docker logs -f'],
    ['kubectl logs -f pod/web', 'kubectl logs -f'],
    ['kubectl port-forward svc/web 8080:80', 'kubectl port-forward'],
    ['tail -f /var/log/syslog', 'tail -f'],
    ['tail -F app.log', 'tail -f'],
    ['tail -n 20 -f app.log', 'tail -f'],
    ['tail --follow=name app.log', 'tail -f'],
    ['journalctl -fu nginx', 'journalctl -f'],
    ['watch -n 1 ls', 'watch'],
    ['jupyter lab', 'jupyter lab'],
    ['http-server dist', 'http-server'],
    ['tsc --watch', 'tsc --watch'],
    ['sleep infinity', 'sleep infinity'],
    ['sudo docker compose up', 'docker compose up'],
    ['echo start; npm run dev', 'npm run dev'],
    ['out=$(npm run dev)', 'npm run dev'],
  ];
  for (const [command, label] of servers) {
    void it(`refuses ${JSON.stringify(command)} (${label}) as long-lived`, () => {
      assert.equal(findForegroundHazard(command), LONG_LIVED_GUIDANCE);
    });
  }

  const allowed: [why: string, command: string][] = [
    ['--help form', 'npm run dev --help'],
    ['--help form', 'uvicorn --help'],
    ['--help form', 'docker compose up --help'],
    ['--help form', 'nohup --help'],
    ['--version form', 'vite --version'],
    ['--version form', 'python3 -m http.server --version'],
    ['--version form', 'gunicorn --version'],
    ['quoted text', 'echo "use nohup"'],
    ['quoted text', 'git commit -m "npm run dev &"'],
    ['quoted text', "echo 'run: docker compose up'"],
    ['quoted text', 'echo "a & b"'],
    ['quoted text', "grep -r 'tail -f' ."],
    ['quoted text', "python3 -c 'import os; os.setsid()'"],
    ['backquoted text', 'echo `echo nohup`'],
    ['comment', 'ls # then nohup & vite'],
    ['heredoc body', 'cat <<EOF > run.sh\nnohup ./server &\nnpm run dev\nEOF\nchmod +x run.sh'],
    ['&& chain', 'make && make test'],
    ['|| chain', 'test -f x || touch x'],
    ['2>&1 redirect', 'make 2>&1 | tail -n 20'],
    ['>&2 redirect', 'echo oops >&2'],
    ['&> redirect', 'make &> build.log'],
    ['&>> redirect', 'make &>> build.log'],
    ['|& pipe', 'make |& tee build.log'],
    ['<&0 redirect', 'cat <&0'],
    ['arithmetic &', 'echo $((5 & 3))'],
    ['arithmetic command &', '(( x & 1 )) && echo odd'],
    ['case fallthrough', 'case $x in a) echo a;& b) echo b;; esac'],
    ['finite build', 'npm run build'],
    ['finite build', 'vite build'],
    ['finite script', 'yarn test'],
    ['detached compose', 'docker compose up -d'],
    ['detached compose', 'docker compose up --detach web'],
    ['detached compose', 'docker-compose up -d --build'],
    ['compose --wait', 'docker compose up --wait'],
    ['tail without follow', 'tail -n 50 app.log'],
    ['bounded by timeout', 'timeout 10 npm run dev'],
    ['bounded by timeout', 'timeout -s KILL 5 python -m http.server'],
    ['lookup only', 'command -v vite'],
    ['lookup only', 'which uvicorn'],
    ['argument, not command', 'pip install uvicorn gunicorn'],
    ['argument, not command', 'ls watch'],
    ['array assignment', 'servers=(vite uvicorn)'],
    ['plain command', 'ls -la'],
  ];
  for (const [why, command] of allowed) {
    void it(`allows ${JSON.stringify(command)} (${why})`, () => {
      assert.equal(findForegroundHazard(command), null);
    });
  }

  void it('allows a background & that only backgrounds a --help or --version command', () => {
    assert.equal(findForegroundHazard('vite --help &'), null);
    assert.equal(findForegroundHazard('cd /srv && node --version &'), null);
  });

  void it('still refuses a background & in front of an unrelated --help command', () => {
    assert.equal(findForegroundHazard('sleep 100 & curl --help'), AMPERSAND_GUIDANCE);
    assert.equal(findForegroundHazard('(sleep 100 --version) &'), AMPERSAND_GUIDANCE);
  });
});
